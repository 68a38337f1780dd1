"""NCU004: shared-memory bank conflicts, for loads and stores, with the N-way figure."""

from __future__ import annotations

from collections.abc import Mapping

from analysis.rules.base import Threshold
from analysis.rules.ncu.common import Hit, NcuRule
from analysis.rules.ncu.metrics import Launch, Metric

L1_ACTIVE_PCT = Metric(("l1tex__throughput.avg.pct_of_peak_sustained_active",))
OPS = {
    "ld": ("loads", Metric(("smsp__sass_inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_ld.sum",
                            "sass__inst_executed_shared_loads"))),
    "st": ("stores", Metric(("smsp__sass_inst_executed_op_shared_st.sum", "smsp__inst_executed_op_shared_st.sum",
                             "sass__inst_executed_shared_stores"))),
}
LDSM = Metric(("smsp__inst_executed_op_ldsm.sum",))


class SharedBankConflicts(NcuRule):
    """Shared-memory bank conflicts.

    *Why it matters*: shared memory has 32 banks; threads of a warp hitting different addresses in one bank
    are served one after another, so one instruction takes several wavefronts.

    *How it is detected*: as ncu's SharedMemoryConflicts rule, separately for loads and stores: bank
    conflicts (``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum``) at least 10% of the
    wavefronts (``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum``); N-way = wavefronts per
    shared instruction (``smsp__sass_inst_executed_op_shared_{ld,st}.sum``). Speedup: the conflict share,
    weighted by L1TEX throughput (``l1tex__throughput.avg.pct_of_peak_sustained_active``) when present.

    *Advice*: pad shared arrays (e.g. ``[32][33]``), swizzle indices, or change the access stride.
    """

    id = "NCU004"
    name = "ncu.shared-bank-conflicts"
    category = "memory"
    summary = "Shared-memory accesses serialized by bank conflicts"
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
            pct = 100.0 * conflicts / wavefronts
            if pct < params["min_conflict_pct"]:
                continue
            ways = wavefronts / requests if requests else None
            speedup = pct * l1 / 100.0 if l1 is not None else pct
            way_text = f"an average {ways:.1f}-way bank conflict; " if ways is not None else ""
            hits.append(Hit(
                op, speedup, f"Shared-memory bank conflicts on {what}",
                f"Shared {what} cause {way_text}{conflicts:,.0f} conflicts are {pct:.1f}% of {wavefronts:,.0f} wavefronts",
                "Pad shared arrays (e.g. [32][33] instead of [32][32]), swizzle the index, or change the stride so "
                "the threads of a warp hit different banks.",
                {"bank_conflicts": conflicts, "wavefronts": wavefronts, "requests": requests, "n_way": ways,
                 "l1tex_active_pct": l1}, "global" if l1 is not None else "local"))
        return hits if evaluated else None
