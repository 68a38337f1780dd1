"""NCU002: warp stall reasons that dominate the cycles between issued instructions."""

from __future__ import annotations

from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import ISSUE_ACTIVE, Launch, Metric, issue_slot_bound

CYCLES_PER_ISSUE = Metric(
    ("smsp__average_warp_latency_per_inst_issued.ratio", "smsp__average_warps_active_per_issue_active.ratio"),
    (("warpstatestatistics", "Warp Cycles Per Issued Instruction", 1.0),))
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"

# What each stall reason means and what to do (after Nsight Compute's Kernel Profiling Guide).
REASONS: dict[str, tuple[str, str]] = {
    "long_scoreboard": ("waiting on an L1TEX (global, local, texture, surface) memory result",
                        "Improve access patterns and cache hit rates, prefetch, or move reused data to shared memory."),
    "short_scoreboard": ("waiting on an MIO result (shared memory, special math, dynamic branch)",
                         "Reduce shared-memory bank conflicts and special-function use; keep hot values in registers."),
    "barrier": ("waiting for sibling warps at a __syncthreads() barrier",
                "Balance the work before the barrier across warps; use smaller blocks or fewer barriers."),
    "mio_throttle": ("the MIO instruction queue is full (shared memory, special math, branches)",
                     "Use fewer, wider shared-memory accesses; spread special math out."),
    "lg_throttle": ("the local/global memory instruction queue is full",
                    "Combine narrow loads into wider ones, avoid register spills to local memory."),
    "tex_throttle": ("the texture/L1TEX queue is full", "Issue fewer texture fetches or use plain global loads."),
    "math_pipe_throttle": ("an oversubscribed math pipe", "Balance the instruction mix across pipes or add warps."),
    "wait": ("a fixed-latency execution dependency", "Increase instruction-level parallelism (unroll, independent work)."),
    "not_selected": ("eligible but not selected (enough warps already)",
                     "Usually not a problem; fewer warps may improve cache locality."),
    "no_instruction": ("instruction fetch or instruction-cache miss", "Reduce code size and branch jumps; fill the grid."),
    "branch_resolving": ("a branch target being computed", "Reduce divergent control flow and branches."),
    "dispatch_stall": ("a dispatch conflict", "Usually hardware-bound; check pipe conflicts."),
    "drain": ("outstanding memory writes at exit", "Make end-of-kernel stores coalesced."),
    "imc_miss": ("an immediate-constant cache miss", "Have threads of a warp read the same constant addresses."),
    "membar": ("a memory barrier", "Remove unneeded __threadfence()/memory barriers."),
    "sleeping": ("threads sleeping (nanosleep, yield)", "Reduce NANOSLEEP use or its delay."),
    "misc": ("a miscellaneous hardware reason", "No specific advice."),
}
IGNORED = {"selected"}  # the issuing warp itself: not a stall


class WarpStalls(NcuRule):
    """Warp stalls.

    *Why it matters*: a scheduler issues one instruction per cycle; when warps wait, issue slots go idle
    and the kernel runs longer than its work needs.

    *How it is detected*: as ncu's CPIStall rule: while issue activity
    (``smsp__issue_active.avg.per_cycle_active``) is under 80%, every stall reason whose cycles
    (``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``) exceed 30% of the cycles
    between issued instructions (``smsp__average_warp_latency_per_inst_issued.ratio``) is reported.
    Speedup: that share, capped by ncu's issue-slot bound (1 - issue activity, and 1 - SOL throughput).
    """

    id = "NCU002"
    name = "ncu.warp-stalls"
    category = "compute"
    gain_role = "symptom"
    cause_order = None  # stall reasons: what the causes leave the warps waiting on
    summary = "Warps spend most cycles between instructions stalled on one reason"
    advice = (
        "Depends on the reason (named in each finding): long scoreboard = memory latency; barrier = "
        "imbalance before __syncthreads(); MIO throttle = shared-memory/special-math pressure.")
    label = "Warp stalls"
    collect = "--section WarpStateStats --section SchedulerStats --section SpeedOfLight"
    ncu_rules = ("CPIStall",)
    thresholds = {
        "max_issue_active": Threshold(0.8, "ratio", "only when issue activity per cycle is below this",
                                      minimum=0.0, maximum=1.0),
        "min_stall_share": Threshold(0.3, "ratio", "report reasons above this share of cycles per issued instruction",
                                     minimum=0.0, maximum=1.0),
    }

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        issue, cpi = launch.get(ISSUE_ACTIVE), launch.get(CYCLES_PER_ISSUE)
        stalls = {k: v for k, v in launch.matching(STALL_PREFIX, STALL_SUFFIX).items() if k not in IGNORED}
        if issue is None or cpi is None or not stalls:
            return None
        if issue >= params["max_issue_active"] or cpi <= 0:
            return []
        bound = issue_slot_bound(launch)
        hits = []
        for reason, cycles in sorted(stalls.items(), key=lambda kv: -kv[1]):
            share = cycles / cpi
            if share <= params["min_stall_share"]:
                continue
            speedup = min(share, bound) if bound is not None else share
            meaning, advice = REASONS.get(reason, (reason.replace("_", " "), "See the Kernel Profiling Guide."))
            label = reason.replace("_", " ")
            hits.append(Hit(
                reason, 100.0 * speedup, f"Warp stall '{label}'",
                f"Each warp spends {fmt.number(cycles)} of its {fmt.number(cpi)} cycles between issued instructions stalled on "
                f"'{label}' ({fmt.pct(100 * share)}): {meaning}; issue activity is {fmt.pct(100 * issue)}",
                advice, {"stall_cycles": cycles, "cycles_per_issue": cpi, "issue_active": issue, "reason": reason},
                "global" if bound is not None else "local"))
        return hits
