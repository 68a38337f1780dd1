"""NCU001: uncoalesced global memory access (excess L2 sectors, or sectors per request above the ideal)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.ncu.access_width import ideal_per_request
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import Launch, Metric

L2_SECTORS = Metric(("memory_l2_theoretical_sectors_global",))
L2_IDEAL = Metric(("memory_l2_theoretical_sectors_global_ideal",))
L2_EXCESS = Metric(("derived__memory_l2_theoretical_sectors_global_excessive",))
L2_ACTIVE = Metric(("lts__cycles_active.sum",))
L2_ELAPSED = Metric(("lts__cycles_elapsed.sum",))
SECTOR_BYTES = 32

ADVICE = ("Make consecutive threads of a warp touch consecutive addresses (index with threadIdx.x in the "
          "fastest-varying dimension), use structure-of-arrays instead of arrays of structures, align "
          "buffers, and stage strided or transposed accesses through shared memory.")


_EXCESS_SHARE = re.compile(r"\((\d+(?:\.\d+)?)% of the total")


class UncoalescedGlobalAccess(NcuRule):
    """Uncoalesced global memory access.

    *Why it matters*: a warp's global access is served in 32-byte sectors. When threads touch scattered
    addresses, more sectors move than the data needs, wasting L2/DRAM bandwidth and time.

    *How it is detected*: as ncu's UncoalescedGlobalAccess rule: L2 theoretical global sectors
    (``memory_l2_theoretical_sectors_global``) above the ideal (``..._ideal``); the speedup is the
    excess share of sectors weighted by L2 activity (``lts__cycles_active.sum / lts__cycles_elapsed.sum``).
    Without those metrics: L1TEX sectors per request for loads and for stores
    (``l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum`` / ``l1tex__t_requests_...``) against the
    ideal for the access width: from ``smsp__sass_average_data_bytes_per_sector_mem_global_op_{ld,st}.ratio``,
    else from the SASS data bytes per request (``smsp__sass_data_bytes_mem_global_op_{ld,st}.sum``), else
    inferred from the element types in the kernel's demangled name (template arguments, pointer
    parameters: ``float`` means 4-byte accesses, 4 sectors per full-warp request; the widest type named
    is taken, and the finding states the assumption); with none of these, against the 16 sectors of the
    widest access (a lower bound on the waste).
    """

    id = "NCU001"
    name = "ncu.uncoalesced-global-access"
    category = "memory"
    gain_role = "cause"
    cause_order = 10  # wasted sectors: fixed in the code that accesses memory
    cause_step = ("coalesce the global accesses: consecutive threads of a warp touch consecutive elements "
                  "(grid-stride or interleaved indexing; transpose through shared memory)")
    removes_work = True
    summary = "Global loads/stores move more 32-byte sectors than the data needs"
    advice = (
        "Coalesce: consecutive threads on consecutive addresses; structure-of-arrays; stage strided "
        "access through shared memory.")
    label = "Uncoalesced global accesses"
    collect = ("--section SourceCounters --metrics lts__cycles_active.sum,lts__cycles_elapsed.sum,"
               "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,"
               "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum")
    ncu_rules = ("UncoalescedGlobalAccess",)
    thresholds = {"min_excess_pct": Threshold(0.0, "%", "report when excess sectors exceed this share of all sectors",
                                              minimum=0.0, maximum=100.0)}

    def sol_scale(self, launch: Launch, hit: Hit) -> dict[str, float] | None:
        """Coalesced, the kernel moves only the ideal sectors: its memory terms shrink by the excess share."""
        d = hit.detail
        if d.get("l2_sectors"):
            keep = 1.0 - d["excess_sectors"] / d["l2_sectors"]
        elif d.get("sectors_per_request"):
            keep = d["ideal_sectors_per_request"] / d["sectors_per_request"]
        else:  # ncu's own rule result: "... excessive sectors (75% of the total ... sectors)"
            m = _EXCESS_SHARE.search(hit.message or "")
            if m is None:
                return None
            keep = 1.0 - float(m[1]) / 100.0
        keep = min(max(keep, 0.0), 1.0)
        return {"l1": keep, "l2": keep, "dram": keep, "memory": keep}

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        total, ideal = launch.get(L2_SECTORS), launch.get(L2_IDEAL)
        if total is not None and ideal is not None:
            return self._l2(launch, total, ideal, params)
        hits: list[Hit] = []
        evaluated = False
        for op, what in (("ld", "loads"), ("st", "stores")):
            sectors = launch.get(Metric((f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum",)))
            requests = launch.get(Metric((f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum",)))
            if sectors is None or requests is None:
                continue
            evaluated = True
            if requests <= 0:
                continue
            per_request = sectors / requests
            bps = launch.get(Metric((f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio",)))
            width = ideal_per_request(launch, op, per_request, bps)
            ideal_pr, source, assumption = width.ideal_sectors_per_request, width.source, width.assumption
            if per_request <= ideal_pr:
                continue
            excess_pct = 100.0 * (1.0 - ideal_pr / per_request)
            if excess_pct <= params["min_excess_pct"]:
                continue
            hits.append(Hit(
                f"l1_{op}", excess_pct, f"Uncoalesced global {what}",
                f"Global {what} use {fmt.number(per_request)} sectors per request where {fmt.number(ideal_pr)} would carry the data "
                f"({fmt.pct(excess_pct)} of the sectors are excess" + (f"; {assumption})" if assumption else ")"),
                ADVICE, {"sectors": sectors, "requests": requests, "sectors_per_request": per_request,
                         "ideal_sectors_per_request": ideal_pr, "bytes_per_sector": bps, "width_source": source,
                         "assumption": assumption or None}))
        return hits if evaluated else None

    def _l2(self, launch: Launch, total: float, ideal: float, params: Mapping[str, float]) -> list[Hit]:
        excess = launch.get(L2_EXCESS)
        if excess is None:
            excess = max(0.0, total - ideal)
        if total <= ideal or excess <= 0 or total <= 0:
            return []
        share = excess / total
        if 100.0 * share <= params["min_excess_pct"]:
            return []
        active, elapsed = launch.get(L2_ACTIVE), launch.get(L2_ELAPSED)
        active_share = active / elapsed if active is not None and elapsed else None
        speedup = 100.0 * share * (active_share if active_share is not None else 1.0)
        return [Hit(
            "l2", speedup, "Uncoalesced global accesses",
            f"Uncoalesced global accesses cause {fmt.number(excess)} excess L2 sectors ({fmt.pct(100 * share)} of "
            f"{fmt.number(total)}; ideal {fmt.number(ideal)})",
            ADVICE, {"l2_sectors": total, "l2_sectors_ideal": ideal, "excess_sectors": excess,
                     "l2_active_share": active_share},
            "global" if active_share is not None else "local")]
