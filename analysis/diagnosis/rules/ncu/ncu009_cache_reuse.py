"""NCU009: poor L2 reuse: low L2 hit rate while the data the kernel fetched fits the L2."""

from __future__ import annotations

from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.ncu.memory import story
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import Launch

ADVICE = ("Reorder the work so blocks that share data run together (tile or swizzle the block order, e.g. "
          "grouped GEMM rasterization), tile loops so a tile is reused while it is resident, keep data that "
          "the next kernel reads in L2 with persistence controls (cudaAccessPolicyWindow / "
          "cudaLimitPersistingL2CacheSize) or fuse producer and consumer kernels, and avoid evict-first "
          "(streaming) load hints on data that is reused.")


class PoorCacheReuse(NcuRule):
    """Poor cache reuse.

    *Why it matters*: an L2 hit costs a fraction of a DRAM access in latency and bandwidth. When the data a
    kernel fetches from DRAM would fit in the L2, a low hit rate means bytes are fetched again and again
    (or cold every launch) instead of being reused on chip.

    *How it is detected*: the L2 sector hit rate (``lts__t_sector_hit_rate.pct``, ncu's "L2 Hit Rate") is
    below 50% while the DRAM traffic of the launch (``dram__bytes.sum``, the data that missed) is no larger
    than the L2 (``device__attribute_l2_cache_size``, else the product table of ``analysis.diagnosis.ncu.hardware``).
    Speedup: the DRAM traffic saved by reaching the target hit rate, (1 - (1 - target) / (1 - hit)),
    weighted by the DRAM share of peak (``dram__throughput.avg.pct_of_peak_sustained_elapsed``) as ncu
    weights its memory rules by unit activity.
    """

    id = "NCU009"
    name = "ncu.poor-cache-reuse"
    category = "memory"
    gain_role = "cause"
    cause_order = 50  # bytes fetched again and again
    cause_step = ("reuse data while it is in cache: tile or block the loops so each byte from DRAM is used several "
                  "times")
    summary = "L2 hit rate low although the kernel's DRAM data fits in L2"
    advice = (
        "Reorder or tile for locality, persistence controls, kernel fusion, no evict-first hints on "
        "reused data.")
    label = "Poor cache reuse"
    collect = ("--section MemoryWorkloadAnalysis --section SpeedOfLight --metrics lts__t_sector_hit_rate.pct,"
               "dram__bytes.sum,device__attribute_l2_cache_size")
    thresholds = {"min_hit_pct": Threshold(50.0, "%", "report an L2 hit rate below this (also the target rate)",
                                           minimum=0.0, maximum=100.0)}

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        memory = story(launch)
        by = {lv["name"]: lv for lv in memory["levels"]}
        l2, dram = by.get("l2") or {}, by.get("dram") or {}
        hit, dram_bytes, l2_size = l2.get("hit_rate_pct"), dram.get("bytes"), memory["hardware"]["l2_bytes"]
        if hit is None or dram_bytes is None or not l2_size:
            return None
        target = params["min_hit_pct"]
        if hit >= target or dram_bytes > l2_size or hit >= 100.0:
            return []
        saved = 1.0 - (1.0 - target / 100.0) / (1.0 - hit / 100.0)
        weight = dram.get("pct_of_peak")
        speedup = saved * (weight / 100.0 if weight is not None else 1.0)
        detail = {"l2_hit_rate_pct": hit, "dram_bytes": dram_bytes, "l2_bytes": l2_size,
                  "l2_bytes_source": memory["hardware"]["l2_bytes_source"], "dram_pct_of_peak": weight,
                  "target_hit_rate_pct": target, "dram_traffic_saved_share": saved}
        return [Hit("l2_reuse", 100.0 * speedup, "Poor L2 cache reuse",
                    f"L2 hit rate is {fmt.pct(hit)} although the {fmt.size(dram_bytes)} this launch moved to or from DRAM "
                    f"fit in the {fmt.size(l2_size)} L2; reaching {fmt.pct(target)} would cut DRAM traffic by "
                    f"{fmt.pct(100 * saved)}", ADVICE, detail, "global" if weight is not None else "local")]
