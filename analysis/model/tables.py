"""A report's kernel and NVTX tables (the run page's drill-down) and the run's kernel x rank matrix.

Plain rows for the browser, from one opened report (``analysis.model.trace.Trace``), largest total time first.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from analysis.model.kernel_names import VOLATILE_NVTX_SQL, short_kernel_name
from analysis.model.trace import Trace

TABLE_LIMIT = 500   # rows of the kernel / NVTX tables sent to the browser (largest total time first)


class KernelRow(TypedDict):
    """One kernel name of a report: launches, total, mean, min and max time (None: an ncu launch without a
    duration), streams (None for ncu), share of all kernel time, and (ncu) the best estimated speedup."""

    name: str
    short: str
    category: str | None
    count: int
    total_ns: int | None
    mean_ns: int | None
    min_ns: int | None
    max_ns: int | None
    streams: int | None
    pct: float | None
    speedup_pct: NotRequired[float | None]


class NvtxRow(TypedDict):
    """One NVTX range text and domain: count and durations."""

    text: str
    domain: str | None
    count: int
    total_ns: int
    mean_ns: int
    min_ns: int
    max_ns: int


class ReportTables(TypedDict):
    """A report's kernel table and NVTX table (``analysis.api.report_tables``)."""

    kernels: list[KernelRow]
    nvtx: list[NvtxRow]


class MatrixKernel(TypedDict):
    name: str
    short: str
    total_ns: list[int | None]


class RankMatrix(TypedDict):
    """Kernel x rank total time (``kernel_rank_matrix``): the rank labels, and per kernel its total on each."""

    ranks: list[str]
    kernels: list[MatrixKernel]


def kernel_table(trace: Trace) -> list[KernelRow]:
    """Per kernel name of an nsys report: launches, total/mean/min/max time and share of all kernel time."""
    if not trace.has_rows("kernels"):
        return []
    rows = trace.sql(
        """SELECT name, any_value(category), count(*), sum(end_ns - start_ns), min(end_ns - start_ns),
                  max(end_ns - start_ns), count(DISTINCT stream), sum(sum(end_ns - start_ns)) OVER ()
             FROM kernels GROUP BY name ORDER BY 4 DESC, 1 LIMIT $lim""",
        {"lim": TABLE_LIMIT},
    )
    return [{"name": n or "", "short": short_kernel_name(n or ""), "category": c, "count": int(k),
             "total_ns": int(t), "mean_ns": int(t) // max(1, int(k)), "min_ns": int(mn), "max_ns": int(mx),
             "streams": int(s), "pct": 100.0 * int(t) / int(all_t) if all_t else None}
            for n, c, k, t, mn, mx, s, all_t in rows]


def nvtx_table(trace: Trace) -> list[NvtxRow]:
    """Per NVTX range text (volatile counters such as ``op_id = N`` folded) and domain: count and durations."""
    if not trace.has_rows("nvtx"):
        return []
    rows = trace.sql(
        f"""SELECT {VOLATILE_NVTX_SQL} AS t, domain, count(*), sum(end_ns - start_ns), min(end_ns - start_ns),
                   max(end_ns - start_ns)
              FROM nvtx WHERE end_ns IS NOT NULL GROUP BY t, domain ORDER BY 4 DESC, 1 LIMIT $lim""",  # noqa: S608
        {"lim": TABLE_LIMIT},
    )
    return [{"text": t or "", "domain": d, "count": int(k), "total_ns": int(tt), "mean_ns": int(tt) // max(1, int(k)),
             "min_ns": int(mn), "max_ns": int(mx)} for t, d, k, tt, mn, mx in rows]


def kernel_rank_matrix(traces: list[tuple[str, Trace]], top: int = 15) -> RankMatrix:
    """Kernel x rank total time for the ``top`` kernels (by their largest total on any rank).

    ``traces`` are (rank label, nsys Trace) pairs; a straggler kernel shows as one rank's outlying cell.
    """
    per: list[dict[str, int]] = []
    for _label, trace in traces:
        rows = trace.sql("SELECT name, sum(end_ns - start_ns) FROM kernels GROUP BY name ORDER BY 2 DESC LIMIT 200") \
            if trace.has_rows("kernels") else []
        per.append({n or "": int(t) for n, t in rows})
    names = sorted({n for p in per for n in p}, key=lambda n: -max(p.get(n, 0) for p in per))[:top]
    return {"ranks": [label for label, _ in traces],
            "kernels": [{"name": n, "short": short_kernel_name(n), "total_ns": [p.get(n) for p in per]} for n in names]}


def ncu_kernel_table(trace: Trace) -> list[KernelRow]:
    """Per kernel name of an ncu report: profiled launches, their durations as the headline and the rules see
    them (the exported column, else gpu__time_duration, else cycles / clock), share and best estimated speedup."""
    from analysis.model.ncu_metrics import load_launches

    if not trace.has_rows("ncu_kernels"):
        return []
    by_name: dict[str, tuple[int, list[float], float | None]] = {}
    for launch in load_launches(trace):
        count, durations, best = by_name.get(launch.name, (0, [], None))
        if launch.duration_ns is not None:
            durations.append(launch.duration_ns)
        for r in launch.rules:
            sp = r.get("speedup_pct")
            if sp is not None and (best is None or sp > best):
                best = float(sp)
        by_name[launch.name] = (count + 1, durations, best)
    all_t = sum(sum(d) for _, d, _ in by_name.values())
    out: list[KernelRow] = []
    totals: dict[str, float | None] = {}
    for n, (k, durations, sp) in by_name.items():
        totals[n] = sum(durations) if durations else None
        t = round(sum(durations)) if durations else None
        out.append({"name": n, "short": short_kernel_name(n), "category": "ncu", "count": k,
                    "total_ns": t, "mean_ns": None if t is None else round(t / len(durations)),
                    "min_ns": round(min(durations)) if durations else None,
                    "max_ns": round(max(durations)) if durations else None,
                    "streams": None, "pct": 100.0 * sum(durations) / all_t if durations and all_t else None,
                    "speedup_pct": sp})
    out.sort(key=lambda r: (totals[r["name"]] is None, -(totals[r["name"]] or 0.0), r["name"]))
    return out[:TABLE_LIMIT]
