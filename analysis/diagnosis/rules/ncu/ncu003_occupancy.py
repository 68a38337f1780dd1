"""NCU003: low theoretical occupancy (with its limiting resource) and achieved occupancy far below it."""

from __future__ import annotations

from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import Launch, Metric, issue_slot_bound

THEORETICAL = Metric(("sm__maximum_warps_per_active_cycle_pct",), (("occupancy", "Theoretical Occupancy", 1.0),))
ACHIEVED = Metric(("sm__warps_active.avg.pct_of_peak_sustained_active",), (("occupancy", "Achieved Occupancy", 1.0),))
LIMITS = {
    "registers": (Metric(("launch__occupancy_limit_registers",), (("occupancy", "Block Limit Registers", 1.0),)),
                  "the registers each thread needs", "Reduce register use (__launch_bounds__, -maxrregcount)."),
    "shared_mem": (Metric(("launch__occupancy_limit_shared_mem",), (("occupancy", "Block Limit Shared Mem", 1.0),)),
                   "the shared memory each block needs", "Use less shared memory per block or a larger carve-out."),
    "warps": (Metric(("launch__occupancy_limit_warps",), (("occupancy", "Block Limit Warps", 1.0),)),
              "the number of warps in each block", "Use a block size that divides the SM's warp limit."),
    "blocks": (Metric(("launch__occupancy_limit_blocks",), (("occupancy", "Block Limit SM", 1.0),)),
               "the number of blocks an SM can hold", "Use larger blocks so the block limit is not reached first."),
}


class Occupancy(NcuRule):
    """Occupancy.

    *Why it matters*: resident warps hide latency; too few of them leave the schedulers idle.

    *How it is detected*: as ncu's TheoreticalOccupancy and AchievedOccupancy rules: theoretical occupancy
    (``sm__maximum_warps_per_active_cycle_pct``) under 80% is reported with the limiting resource (the
    smallest of ``launch__occupancy_limit_{registers,shared_mem,warps,blocks}``), speedup 1 - theoretical;
    achieved occupancy (``sm__warps_active.avg.pct_of_peak_sustained_active``) more than 10 points below
    theoretical is reported with speedup (theoretical - achieved) / theoretical. Both are capped by ncu's
    issue-slot bound when the scheduler metrics are present. Occupancy is never reported where warps are not
    the limit (``analysis.diagnosis.ncu.limiter``): a grid under one wave, or a unit at its peak.
    """

    id = "NCU003"
    name = "ncu.occupancy"
    category = "compute"
    gain_role = "cause"
    cause_order = 60  # occupancy held down by resources
    summary = "Theoretical occupancy below 80% of the maximum, or achieved occupancy far below theoretical"
    advice = (
        "Relieve the limiter (registers, shared memory, block size); for achieved occupancy, fix load "
        "imbalance and tail effects.")
    label = "Occupancy"
    collect = "--section Occupancy --section LaunchStats --section SchedulerStats"
    ncu_rules = ("TheoreticalOccupancy", "AchievedOccupancy", "Occupancy")
    thresholds = {
        "min_theoretical_pct": Threshold(80.0, "%", "report theoretical occupancy below this",
                                         minimum=0.0, maximum=100.0),
        "max_achieved_gap_pct": Threshold(10.0, "points", "report achieved occupancy this far below theoretical",
                                          minimum=0.0, maximum=100.0),
    }

    def from_ncu_rules(self, launch: Launch) -> list[Hit] | None:
        if _not_warps(launch):  # ncu's own occupancy estimate ignores the grid's size: not where warps limit
            return None
        return super().from_ncu_rules(launch)

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        theo, ach = launch.get(THEORETICAL), launch.get(ACHIEVED)
        if theo is None:
            return None
        if _not_warps(launch):
            return []  # a sub-wave grid or a saturated unit: more resident warps cannot make it faster
        bound = issue_slot_bound(launch)
        kind = "global" if bound is not None else "local"
        hits = []
        if theo < params["min_theoretical_pct"]:
            limits = {k: launch.get(m) for k, (m, _, _) in LIMITS.items()}
            known = {k: v for k, v in limits.items() if v is not None}
            lowest = min(known.values()) if known else None
            limiters = [k for k, v in known.items() if v == lowest]
            local = 1.0 - theo / 100.0
            why = " and ".join(LIMITS[k][1] for k in limiters) or "an unknown resource (collect --section Occupancy)"
            advice = " ".join(LIMITS[k][2] for k in limiters) or "Collect the Occupancy section to see the limiter."
            hits.append(Hit(
                "theoretical", 100.0 * (min(local, bound) if bound is not None else local), "Low theoretical occupancy",
                f"Theoretical occupancy is {fmt.pct(theo)}, limited by {why}", advice,
                {"theoretical_occupancy_pct": theo, "limiters": limiters, "block_limits": known}, kind))
        if ach is not None and theo > 0 and theo - ach > params["max_achieved_gap_pct"]:
            local = (theo - ach) / theo
            hits.append(Hit(
                "achieved", 100.0 * (min(local, bound) if bound is not None else local), "Achieved occupancy gap",
                f"Achieved occupancy {fmt.pct(ach)} is {fmt.number(theo - ach)} points below the theoretical {fmt.pct(theo)}",
                "Look for load imbalance between warps and blocks, a tail wave, or too few blocks for the GPU.",
                {"theoretical_occupancy_pct": theo, "achieved_occupancy_pct": ach}, kind))
        return hits


def _not_warps(launch: Launch) -> bool:
    """Occupancy has no saving unless the grid fills at least one wave and no unit is at its peak: a sub-wave grid
    is a launch, tail or batching problem (NCU005), a saturated unit the kernel's limiter (NCU005, NCU007)."""
    from analysis.diagnosis.ncu.limiter import limiter

    return limiter(launch)["kind"] in ("launch", "memory", "pipe", "issue", "compute")
