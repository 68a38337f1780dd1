"""NCU005: the speed-of-light classification: latency-bound, small grid, memory-bound (DRAM/L2/L1) or compute-bound."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import fmt
from analysis.diagnosis.ncu.limiter import limiter
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import Launch, Metric

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

    *How it is detected*: the kernel's class is the memory story's ``bound`` (one function for the page, the
    JSON and this rule): bandwidth-bound when the busiest memory level (``dram``/``lts``/``l1tex__throughput``
    as % of peak, else ncu's ``gpu__compute_memory_throughput``) reaches the latency threshold (60%, ncu's
    SOLBottleneck) and compute (``sm__throughput``) does not exceed it; compute-bound when SM throughput does;
    latency-bound only when the memory-latency stalls show it; otherwise the class is unknown and the finding
    says so. A launch whose limiter (``analysis.diagnosis.ncu.limiter``) is its shape, a grid under one wave
    (``launch__waves_per_multiprocessor``) or a tiny launch with every unit idle, is named as such (a cause). 80% or more = at the
    roofline, and compute and memory within 10 points = balanced: no finding. ncu gives no speedup for this
    rule; Goodput uses the headroom of the busiest unit, 1 - max(compute, memory), an upper bound.
    """

    id = "NCU005"
    name = "ncu.throughput-bottleneck"
    category = "compute"
    gain_role = "symptom"
    cause_order = None  # the speed-of-light class
    cause_kinds = {"small_grid": 30}  # a launch too small for the GPU: a cause, after NCU004's, before NCU006's
    summary = "Speed-of-light classification: latency-bound, small grid, memory- or compute-bound"
    advice = (
        "Latency: more parallelism per SM (occupancy, ILP), fewer dependent memory round trips; small "
        "grid: more blocks; memory-bound: less traffic (fusion, reuse, coalescing); compute-bound: fewer "
        "or cheaper instructions (tensor cores, lower precision).")
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
    # (the class of the longest launch names it), so their time is not counted twice. The class is the memory
    # story's ``bound`` (analysis.diagnosis.ncu.memory.bound) with this rule's latency threshold: the page, the JSON and
    # this finding never disagree.
    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        # Imported here: analysis.diagnosis.ncu.memory imports this package (its metric helpers) while it initializes.
        from analysis.diagnosis.ncu.memory import story

        b = story(launch, {"bandwidth_pct": params["latency_pct"]})["bound"]
        n = b["numbers"]
        sm, mem = n["compute_pct"], n["busiest_level_pct"]
        if sm is None and mem is None:
            return None
        top = max(v for v in (sm, mem, n.get("memory_pct")) if v is not None)
        if top >= params["roofline_pct"]:
            return []
        speedup = 100.0 - top
        detail: dict[str, Any] = {"compute_pct": sm, "memory_pct": n.get("memory_pct"), "bound_kind": b["kind"],
                                  "bound_reason": b["reason"], "busiest_level": n["busiest_level"],
                                  "busiest_level_pct": mem}
        shown = f"compute {_pct(sm)} and memory {_pct(mem)} of peak"
        if b["kind"] in ("bandwidth", "compute"):
            if sm is not None and mem is not None and abs(sm - mem) < params["balanced_points"]:
                return []
            if b["kind"] == "bandwidth":
                units = {name: launch.get(m) for name, m in UNITS.items()}
                detail.update({f"{k.lower()}_pct": v for k, v in units.items() if v is not None})
                level = LEVEL_NAMES.get(b["level"], "memory")
                return [Hit("sol", speedup, f"Memory-bound kernel ({level})", f"{b['reason']}; {shown}",
                            "Move fewer bytes: fuse kernels, reuse data from shared memory or cache, coalesce "
                            "accesses, use narrower data types.", detail, "upper_bound")]
            return [Hit("sol", speedup, "Compute-bound kernel", f"{b['reason']}; {shown}",
                        "Execute fewer or cheaper instructions: tensor cores, lower precision, remove redundant math.",
                        detail, "upper_bound")]
        waves = launch.get(WAVES)
        detail["waves_per_sm"] = waves
        lim = limiter(launch)
        if lim["kind"] == "launch":
            detail["bound_kind"] = "small_grid"  # a launch-shape cause (analysis.diagnosis.ncu_gains ranks it so)
            detail["limiter"] = {k: lim[k] for k in ("kind", "name", "reason")}
            if waves is not None and waves < 1:
                return [Hit("sol", speedup, "Grid too small to fill the GPU",
                            f"The grid fills only {fmt.number(waves)} waves of the SMs; {shown}",
                            "Launch more blocks: batch the work of several launches into one (more images, "
                            "sequences or matrices per call), split it finer, or fuse it with its neighbours.",
                            detail, "upper_bound")]
            return [Hit("sol", speedup, "Launch too small for the GPU",
                        f"The launch is too small to occupy the GPU: {lim['reason']}; {shown}",
                        "Batch the work of several launches into one (more images, sequences or matrices per call), "
                        "fuse it with its neighbours, or capture the sequence in a CUDA graph to cut launch costs.",
                        detail, "upper_bound")]
        if b["kind"] == "latency":
            return [Hit("sol", speedup, "Latency-bound kernel", f"Memory latency: {b['reason']}",
                        "Raise parallelism per SM (occupancy, instruction-level parallelism) and cut dependent memory "
                        "round trips; see the warp-stall (NCU002) and occupancy (NCU003) findings.",
                        detail, "upper_bound")]
        return [Hit("sol", speedup, "No unit near its peak",
                    f"Compute and memory throughput are both under {fmt.pct(params['latency_pct'])} of peak ({shown}); "
                    f"the cause is not classified: {b['reason']}",
                    "Look at the warp stalls (NCU002), occupancy (NCU003) and launch shape (NCU006); collect "
                    "`ncu --section WarpStateStats` to tell memory latency from other limits.",
                    detail, "upper_bound")]


LEVEL_NAMES = {"dram": "DRAM", "l2": "L2", "l1": "L1", "sysmem": "system memory", "peer": "peer memory",
               "memory": "memory"}


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{fmt.pct(value)}"
