"""NCU004: shared-memory bank conflicts, for loads and stores, with the N-way figure."""

from __future__ import annotations

import math
from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.ncu.access_width import SECTOR_BYTES, WARP, from_name
from analysis.diagnosis.ncu.limiter import SATURATED_PCT
from analysis.diagnosis.ncu.sol import SHARED_PCT
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import Launch, Metric

L1_ACTIVE_PCT = Metric(("l1tex__throughput.avg.pct_of_peak_sustained_active",))
OPS = {
    "ld": ("loads", Metric(("smsp__sass_inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_ld.sum",
                            "sass__inst_executed_shared_loads"))),
    "st": ("stores", Metric(("smsp__sass_inst_executed_op_shared_st.sum", "smsp__inst_executed_op_shared_st.sum",
                             "sass__inst_executed_shared_stores"))),
}
LDSM = Metric(("smsp__inst_executed_op_ldsm.sum",))
WAVEFRONT_BYTES = 128


class SharedBankConflicts(NcuRule):
    """Shared-memory bank conflicts.

    *Why it matters*: shared memory has 32 banks; threads of a warp hitting different addresses in one bank
    are served one after another, so one instruction takes several wavefronts.

    *How it is detected*: as ncu's SharedMemoryConflicts rule, separately for loads and stores, but counting
    only wavefronts beyond what the access width needs: a warp's conflict-free shared access of w bytes per
    thread takes ceil(32 w / 128) wavefronts (``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum``
    against ``smsp__sass_inst_executed_op_shared_{ld,st}.sum``), w from the SASS data bytes
    (``smsp__sass_data_bytes_mem_shared_op_{ld,st}.sum``) or the element type in the kernel's name (stated
    as an assumption). Excess = the smaller of the conflict counter
    (``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum``) and the wavefronts over that ideal;
    reported at 10% of the wavefronts or more. N-way = wavefronts / ideal wavefronts (not stated when the
    width is unknown). Speedup: the excess share, weighted by L1TEX throughput
    (``l1tex__throughput.avg.pct_of_peak_sustained_active``) when present.
    """

    id = "NCU004"
    name = "ncu.shared-bank-conflicts"
    category = "memory"
    gain_role = "cause"
    cause_order = 20  # bank conflicts: fixed in the code that accesses shared memory
    cause_step = "remove the shared-memory bank conflicts (pad the shared array, swizzle the index)"
    removes_work = True
    summary = "Shared-memory accesses serialized by bank conflicts"
    advice = "Pad shared arrays (e.g. ``[32][33]``), swizzle indices, or change the access stride."
    label = "Shared-memory bank conflicts"
    collect = ("--section MemoryWorkloadAnalysis_Tables --metrics "
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,"
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,"
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,"
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,"
               "smsp__sass_inst_executed_op_shared_ld.sum,smsp__sass_inst_executed_op_shared_st.sum")
    ncu_rules = ("SharedMemoryConflicts",)
    thresholds = {"min_conflict_pct": Threshold(10.0, "%", "report when conflicts reach this share of wavefronts",
                                                minimum=0.0, maximum=100.0)}

    def sol_scale(self, launch: Launch, hit: Hit) -> dict[str, float] | None:
        """Without the conflicts, shared memory serves only the wavefronts the accesses need."""
        d = hit.detail
        if not d.get("wavefronts"):
            return None
        return {"shared": min(max(1.0 - d["excess_wavefronts"] / d["wavefronts"], 0.0), 1.0)}

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        hits: list[Hit] = []
        evaluated = False
        l1 = launch.get(L1_ACTIVE_PCT)
        for op, (what, requests_metric) in OPS.items():
            conflicts = launch.get(Metric((f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum",)))
            wavefronts = launch.get(Metric((f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum",)))
            if conflicts is None or wavefronts is None:
                continue
            evaluated = True
            requests = launch.get(requests_metric)
            if requests is not None and op == "ld":
                requests += launch.get(LDSM) or 0.0
            if requests == 0 or wavefronts <= 0:
                continue
            width = shared_width(launch, op, requests)
            ideal = requests * ideal_wavefronts(width[0]) if requests and width else None
            # Both the conflict counter and the wavefronts beyond the access width's ideal bound the real
            # conflicts from above (wide accesses take several wavefronts without any conflict): take the smaller.
            excess = conflicts if ideal is None else min(conflicts, max(0.0, wavefronts - ideal))
            pct = 100.0 * excess / wavefronts
            if pct < params["min_conflict_pct"] or excess <= 0:
                continue
            ways = wavefronts / ideal if ideal else None
            speedup = pct * l1 / 100.0 if l1 is not None else pct
            # Conflicts cost time only where shared-memory wavefronts bound the kernel: shared memory (or L1, which
            # serves it) at a limiting share of its peak. Otherwise the finding stays, with no saving of its own.
            shared_pct = launch.get(SHARED_PCT)
            busy = max((v for v in (l1, shared_pct) if v is not None), default=None)
            if busy is not None and busy < SATURATED_PCT:
                speedup = 0.0
            if ways is not None and width is not None and requests:
                way_text = (f"an average {fmt.number(ways)}-way bank conflict ({fmt.number(wavefronts / requests)} wavefronts per "
                            f"instruction where {fmt.number(ideal_wavefronts(width[0]))} carries {fmt.number(width[0])}-byte "
                            f"accesses{'; ' + width[1] if width[1] else ''}); ")
            else:
                way_text = "no N-way figure (the access width or the instruction count is unknown); "
            hits.append(Hit(
                op, speedup, f"Shared-memory bank conflicts on {what}",
                f"Shared {what} cause {way_text}{fmt.number(excess)} excess wavefronts are {fmt.pct(pct)} of {fmt.number(wavefronts)}"
                + (f"; shared memory is not a limiter here (L1/shared at {fmt.pct(busy)} of peak), so they cost little"
                   if busy is not None and busy < SATURATED_PCT else ""),
                "Pad shared arrays (e.g. [32][33] instead of [32][32]), swizzle the index, or change the stride so "
                "the threads of a warp hit different banks.",
                {"bank_conflicts": conflicts, "wavefronts": wavefronts, "requests": requests, "n_way": ways,
                 "ideal_wavefronts": ideal, "excess_wavefronts": excess,
                 "access_bytes": width[0] if width else None, "width_assumption": (width[1] or None) if width else None,
                 "l1tex_active_pct": l1}, "global" if l1 is not None else "local"))
        return hits if evaluated else None


def shared_width(launch: Launch, op: str, requests: float | None) -> tuple[float, str] | None:
    """Bytes each thread moves per shared instruction and the assumption behind it ('' when measured): the SASS
    data bytes per instruction over a full warp, else the widest element type in the kernel's name."""
    data = launch.get(Metric((f"smsp__sass_data_bytes_mem_shared_op_{op}.sum",
                              f"sm__sass_data_bytes_mem_shared_op_{op}.sum")))
    if data is not None and requests:
        return data / requests / WARP, ""
    width = from_name(launch)
    if width is None:
        return None
    return width.ideal_sectors_per_request * SECTOR_BYTES / WARP, width.assumption


def ideal_wavefronts(access_bytes: float) -> float:
    """Wavefronts a conflict-free warp access needs: shared memory serves 32 banks x 4 B = 128 B per wavefront."""
    return max(1.0, math.ceil(WARP * access_bytes / WAVEFRONT_BYTES - 1e-9))
