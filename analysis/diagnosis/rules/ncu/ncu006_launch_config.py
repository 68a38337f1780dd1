"""NCU006: launch configuration: block size not a multiple of 32, grid smaller than the SM count, tail effect."""

from __future__ import annotations

import math
from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.diagnosis.rules.ncu.ncu003_occupancy import ACHIEVED, THEORETICAL
from analysis.diagnosis.rules.ncu.ncu005_throughput import WAVES
from analysis.model.ncu_metrics import Launch, Metric

BLOCK = Metric(("launch__block_size",), (("launchstatistics", "Block Size", 1.0),))
GRID = Metric(("launch__grid_size",), (("launchstatistics", "Grid Size", 1.0),))
SMS = Metric(("device__attribute_multiprocessor_count",), (("launchstatistics", "# SMs", 1.0),))
WARP = 32


class LaunchConfiguration(NcuRule):
    """Launch configuration.

    *Why it matters*: warps are 32 threads, an SM runs whole blocks, and the grid runs in waves: a partial
    warp, an idle SM or a last partial wave wastes hardware.

    *How it is detected*: as ncu's LaunchConfiguration rule: block size (``launch__block_size``) not a
    multiple of 32, speedup (1 / warps per block) x (unused share of the last warp); grid
    (``launch__grid_size``) smaller than the SM count (``device__attribute_multiprocessor_count``), speedup
    (SMs - blocks) / SMs; tail effect: at least one full wave and a partial one
    (``launch__waves_per_multiprocessor``), where the partial wave may take 1 / (full waves + 1) >= 20%
    of the time while achieved occupancy is under 80% of theoretical, speedup 1 / (full waves + 1).
    """

    id = "NCU006"
    name = "ncu.launch-configuration"
    category = "launch"
    gain_role = "cause"
    cause_order = 40  # a launch shape that explains low achieved occupancy
    summary = "Partial warps, fewer blocks than SMs, or a costly partial last wave"
    advice = (
        "Blocks of 128-256 threads (a multiple of 32); at least one block per SM (better two); size the "
        "grid to whole waves.")
    label = "Launch configuration"
    collect = "--section LaunchStats --section Occupancy"
    ncu_rules = ("LaunchConfiguration",)
    thresholds = {"min_tail_share": Threshold(0.2, "ratio", "report a partial wave that may take this share of time",
                                              minimum=0.0, maximum=1.0)}

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        block = launch.get(BLOCK) or launch.block_size
        grid = launch.get(GRID) or launch.grid_size
        sms, waves = launch.get(SMS), launch.get(WAVES)
        if block is None and (grid is None or sms is None) and waves is None:
            return None
        hits = []
        if block and int(block) % WARP:
            warps = math.ceil(block / WARP)
            speedup = 100.0 * (1.0 / warps) * (1.0 - (int(block) % WARP) / WARP)
            hits.append(Hit("block_size", speedup, "Block size not a multiple of 32",
                            f"Blocks of {fmt.count(block)} threads leave {WARP - int(block) % WARP} of the 32 lanes of their "
                            "last warp idle", "Use a block size that is a multiple of 32 (128-256 is a good start).",
                            {"block_size": block}, "global"))
        if grid is not None and sms and grid < sms:
            hits.append(Hit("small_grid", 100.0 * (sms - grid) / sms, "Fewer blocks than SMs",
                            f"The grid has {fmt.count(grid)} blocks for {fmt.count(sms)} SMs; {fmt.count(sms - grid)} SMs stay idle",
                            "Launch at least one block per SM (two or more when blocks synchronize): smaller blocks "
                            "or a finer split of the work.", {"grid_size": grid, "sm_count": sms}, "global"))
        theo, ach = launch.get(THEORETICAL), launch.get(ACHIEVED)
        if waves is not None and waves > 0 and math.isfinite(waves) and theo and ach is not None:
            partial, whole = math.modf(waves)  # negative or infinite waves (a hostile CSV) have no tail
            tail = 0.0 if partial == 0 else 1.0 / (whole + 1.0)
            if whole >= 1 and tail >= params["min_tail_share"] and ach < 0.8 * theo:
                hits.append(Hit("tail", 100.0 * tail, "Tail effect",
                                f"{fmt.count(whole)} full waves and a partial one: the last wave may take up to "
                                f"{fmt.pct(100 * tail)} of the run time at lower occupancy",
                                "Size the grid to a whole number of waves, or give each block more work so waves "
                                "are many.", {"waves_per_sm": waves, "theoretical_occupancy_pct": theo,
                                             "achieved_occupancy_pct": ach}, "global"))
        return hits
