"""NCU005: the speed-of-light classification: latency-bound, small grid, memory-bound (DRAM/L2/L1) or compute-bound."""

from __future__ import annotations

from collections.abc import Mapping

from analysis.rules.base import Threshold
from analysis.rules.ncu.common import Hit, NcuRule
from analysis.rules.ncu.metrics import MEM_PCT, SM_PCT, Launch, Metric

WAVES = Metric(("launch__waves_per_multiprocessor",), (("launchstatistics", "Waves Per SM", 1.0),))
UNITS = {
    "DRAM": Metric(("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                    "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                   (("gpuspeedoflight", "DRAM Throughput", 1.0),)),
    "L2": Metric(("lts__throughput.avg.pct_of_peak_sustained_elapsed",), (("gpuspeedoflight", "L2 Cache Throughput", 1.0),)),
    "L1": Metric(("l1tex__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_active"),
                 (("gpuspeedoflight", "L1/TEX Cache Throughput", 1.0),)),
}


class ThroughputBottleneck(NcuRule):
    """Throughput bottleneck (speed of light).

    *Why it matters*: a kernel is fast when it keeps either its compute or its memory units near peak.

    *How it is detected*: as ncu's SOLBottleneck rule on compute (``sm__throughput``) and memory
    (``gpu__compute_memory_throughput``) throughput as % of peak: both under 60% = latency issue (or a
    small grid when there is less than one wave, ``launch__waves_per_multiprocessor``); one 10 or more
    points above the other while both are under 80% = memory-bound (naming the busiest of DRAM, L2 and
    L1) or compute-bound; 80% or more = at the roofline, no finding. ncu gives no speedup for this rule;
    Goodput uses the headroom of the busiest unit, 1 - max(compute, memory), an upper bound.

    *Advice*: latency: more parallelism per SM (occupancy, ILP), fewer dependent memory round trips;
    small grid: more blocks; memory-bound: less traffic (fusion, reuse, coalescing); compute-bound:
    fewer or cheaper instructions (tensor cores, lower precision).
    """

    id = "NCU005"
    name = "ncu.throughput-bottleneck"
    category = "compute"
    summary = "Speed-of-light classification: latency-bound, small grid, memory- or compute-bound"
    label = "Throughput bottleneck"
    collect = "--section SpeedOfLight --section LaunchStats"
    ncu_rules = ("SOLBottleneck",)
    thresholds = {
        "roofline_pct": Threshold(80.0, "%", "at or above this share of peak a unit counts as saturated",
                                  minimum=0.0, maximum=100.0),
        "latency_pct": Threshold(60.0, "%", "both units below this share of peak = latency-bound",
                                 minimum=0.0, maximum=100.0),
        "balanced_points": Threshold(10.0, "points", "compute and memory closer than this are balanced",
                                     minimum=0.0, maximum=100.0),
    }

    # One classification per kernel: launches of a kernel that fall in different classes form one finding
    # (the class of the longest launch names it), so their time is not counted twice.
    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        sm, mem = launch.get(SM_PCT), launch.get(MEM_PCT)
        if sm is None or mem is None:
            return None
        top = max(sm, mem)
        if top >= params["roofline_pct"]:
            return []
        speedup = 100.0 - top
        detail: dict[str, float | None] = {"compute_pct": sm, "memory_pct": mem}
        if sm < params["latency_pct"] and mem < params["latency_pct"]:
            waves = launch.get(WAVES)
            detail["waves_per_sm"] = waves
            if waves is not None and waves < 1:
                return [Hit("sol", speedup, "Grid too small to fill the GPU",
                            f"The grid fills only {waves:.2f} waves of the SMs; compute {sm:.1f}% and memory "
                            f"{mem:.1f}% of peak", "Launch more blocks (split the work finer, or batch launches).",
                            detail, "upper_bound")]
            return [Hit("sol", speedup, "Latency-bound kernel",
                        f"Compute ({sm:.1f}%) and memory ({mem:.1f}%) throughput are both under "
                        f"{params['latency_pct']:.0f}% of peak: the kernel waits on latency",
                        "Raise parallelism per SM (occupancy, instruction-level parallelism) and cut dependent memory "
                        "round trips; see the warp-stall (NCU002) and occupancy (NCU003) findings.",
                        detail, "upper_bound")]
        if abs(sm - mem) < params["balanced_points"]:
            return []
        if mem > sm:
            units = {name: launch.get(m) for name, m in UNITS.items()}
            known = {k: v for k, v in units.items() if v is not None}
            unit = max(known, key=known.__getitem__) if known else None
            detail.update({f"{k.lower()}_pct": v for k, v in known.items()})
            where = f"; the busiest unit is {unit} ({known[unit]:.1f}%)" if unit else ""
            return [Hit("sol", speedup, f"Memory-bound kernel ({unit or 'memory'})",
                        f"Memory throughput {mem:.1f}% of peak vs compute {sm:.1f}%{where}",
                        "Move fewer bytes: fuse kernels, reuse data from shared memory or cache, coalesce accesses, "
                        "use narrower data types.", detail, "upper_bound")]
        return [Hit("sol", speedup, "Compute-bound kernel",
                    f"Compute throughput {sm:.1f}% of peak vs memory {mem:.1f}%",
                    "Execute fewer or cheaper instructions: tensor cores, lower precision, remove redundant math.",
                    detail, "upper_bound")]
