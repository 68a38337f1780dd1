"""NCU008: latency-bound memory access (too few bytes in flight to cover the memory latency)."""

from __future__ import annotations

from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.ncu.memory import story
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import Launch, issue_slot_bound

ADVICE = ("Put more independent loads in flight: unroll so each thread issues several loads before using them, "
          "load wider types (float4), process larger tiles per block, copy asynchronously into shared memory "
          "(cp.async / TMA with a multi-stage pipeline), and raise occupancy (fewer registers or less shared "
          "memory per block) so more warps wait at once.")


class LatencyBoundMemory(NcuRule):
    """Latency-bound memory access.

    *Why it matters*: by Little's law a memory level delivers its peak bandwidth only when bytes in flight =
    latency x bandwidth. A kernel whose warps wait on memory results while no level is near its peak does not
    have enough requests outstanding: it pays the full latency of each load instead of overlapping them.

    *How it is detected*: no memory level and not the SM at 60% of peak or more (ncu's SOLBottleneck
    threshold; shares from ``dram__throughput``, ``lts__throughput``, ``l1tex__throughput``
    ``.avg.pct_of_peak_sustained_elapsed`` or bytes / duration / peak), while the memory-latency stall
    reasons (``smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio``, and
    ``memory_dependency`` on older GPUs) take at least 30% of the cycles between issued instructions
    (``smsp__average_warp_latency_per_inst_issued.ratio``; ncu's CPIStall threshold). The finding shows the
    Little's-law numbers: bytes in flight needed (typical latency of the serving level x its peak) and
    sustained (latency x achieved bandwidth), per resident warp, and the observed wait per global load
    (long-scoreboard warp-cycles = the stall ratio x ``smsp__inst_issued.sum``, over
    ``smsp__inst_executed_op_global_ld.sum``) against the typical latency of ``analysis.diagnosis.ncu.hardware``. Speedup: the time the busiest level would
    save running at the threshold share instead of its current one, 1 - share / 60%, capped by the stall
    share (only waiting time can be hidden) and by ncu's issue-slot bound.
    """

    id = "NCU008"
    name = "ncu.latency-bound-memory"
    category = "memory"
    gain_role = "cause"
    cause_order = 70  # too few bytes in flight
    cause_step = "keep more bytes in flight: more independent loads per thread, vectorized accesses, prefetching"
    summary = "Warps wait on memory while no level is near its bandwidth: too few bytes in flight"
    advice = (
        "More independent loads per thread, wider loads, larger tiles, ``cp.async``/TMA pipelines, higher"
        " occupancy.")
    label = "Latency-bound memory access"
    # The per-reason stall ratios are not rows of the WarpStateStats section in a CSV: request them by name.
    collect = ("--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy "
               "--metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,"
               "smsp__average_warp_latency_per_inst_issued.ratio,sm__warps_active.avg.per_cycle_active,"
               "smsp__inst_issued.sum,smsp__inst_executed_op_global_ld.sum")
    thresholds = {
        "bandwidth_pct": Threshold(60.0, "%", "a level at or above this share of its peak is bandwidth-bound",
                                   minimum=0.0, maximum=100.0),
        "min_stall_share": Threshold(0.3, "ratio", "memory-latency stalls must take this share of the cycles "
                                                   "between issued instructions", minimum=0.0, maximum=1.0),
    }

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        memory = story(launch, params)
        b = memory["bound"]
        n = b["numbers"]
        if n["busiest_level_pct"] is None or n["memory_latency_stall_share"] is None:
            return None
        if b["kind"] != "latency":
            return []
        share, stall = n["busiest_level_pct"], n["memory_latency_stall_share"]
        speedup = min(max(0.0, 1.0 - share / params["bandwidth_pct"]), stall)
        cap = issue_slot_bound(launch)
        if cap is not None:
            speedup = min(speedup, cap)
        label = next((lv["label"] for lv in memory["levels"] if lv["name"] == n["busiest_level"]),
                     "memory (ncu's busiest unit)")
        msg = (f"Warps spend {fmt.pct(100 * stall)} of the cycles between instructions waiting on memory results while "
               f"the busiest level ({label}) runs at {fmt.pct(share)} of its peak")
        if all(n.get(k) is not None for k in ("bytes_in_flight_needed", "bytes_in_flight", "latency_ns_typical")):
            msg += (f"; by Little's law {n['serving_level'].upper()} needs {fmt.size(n['bytes_in_flight_needed'])} in "
                    f"flight ({fmt.duration(n['latency_ns_typical'])} typical latency x peak) and gets "
                    f"{fmt.size(n['bytes_in_flight'])}")
            if None not in (n.get("requests_in_flight_per_warp"), n.get("requests_in_flight_per_warp_needed")):
                msg += (f", {fmt.number(n['requests_in_flight_per_warp'])} requests per resident warp where "
                        f"{fmt.number(n['requests_in_flight_per_warp_needed'])} are needed")
        if n.get("load_wait_verdict"):
            msg += (f"; each global load waits {fmt.number(n['load_wait_cycles'])} cycles, {n['load_wait_verdict']} "
                    f"({fmt.number(n['latency_cycles_typical'])} cycles)")
        return [Hit("latency", 100.0 * speedup, "Latency-bound memory access", msg, ADVICE, dict(n),
                    "global" if cap is not None else "local")]
