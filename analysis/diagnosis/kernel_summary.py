"""Kernel summary of one report: per kernel name (optionally per launch shape), count and time statistics."""

from __future__ import annotations

from typing import Any

from analysis.model.trace import Trace

_GROUPS = {
    "name": ("name",),
    "name_grid_block": ("name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"),
}


def kernel_summary(trace: Trace, group_by: str = "name", limit: int | None = 50) -> list[dict[str, Any]]:
    """Kernels grouped by name (``group_by='name'``) or by name and launch shape (``'name_grid_block'``).

    Returns a list, costliest first, of ``{name, category, count, total_ns, mean_ns, median_ns, min_ns,
    max_ns, share_pct}`` (plus ``grid: [x, y, z]`` and ``block: [x, y, z]`` when grouped by shape);
    ``share_pct`` is the group's share of all kernel time of the report. ``limit=None`` returns all.
    """
    if group_by not in _GROUPS:
        raise ValueError(f"group_by must be one of {', '.join(_GROUPS)}")
    if not trace.has_rows("kernels"):
        return []
    keys = ", ".join(_GROUPS[group_by])
    rows = trace.sql(f"""
        WITH k AS (SELECT *, end_ns - start_ns AS dur FROM kernels WHERE end_ns >= start_ns),
        tot AS (SELECT SUM(dur) AS t FROM k)
        SELECT {keys}, ANY_VALUE(category), COUNT(*), SUM(dur), AVG(dur), MEDIAN(dur), MIN(dur), MAX(dur),
               100.0 * SUM(dur) / NULLIF(ANY_VALUE(tot.t), 0)
        FROM k, tot GROUP BY {keys} ORDER BY SUM(dur) DESC, COUNT(*) DESC, name
        {'' if limit is None else 'LIMIT ' + str(int(limit))}""")  # noqa: S608 - keys from a fixed table
    n = len(_GROUPS[group_by])
    out = []
    for r in rows:
        item: dict[str, Any] = {
            "name": r[0], "category": r[n], "count": int(r[n + 1]), "total_ns": int(r[n + 2]),
            "mean_ns": float(r[n + 3]), "median_ns": float(r[n + 4]), "min_ns": int(r[n + 5]),
            "max_ns": int(r[n + 6]), "share_pct": round(float(r[n + 7] or 0.0), 3),
        }
        if group_by == "name_grid_block":
            item["grid"] = list(r[1:4])
            item["block"] = list(r[4:7])
        out.append(item)
    return out
