"""Where a report's GPU time goes: an exact partition of each device's active span from interval unions."""

from __future__ import annotations

from typing import Any

from analysis.intervals import temp_table, union_lengths_sql
from analysis.trace import Trace

PARTS = ("compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns")
KEYS = ("compute_ns", "comm_overlapped_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "span_ns")


def _units_sql(trace: Trace) -> str:
    """Per unit: the union lengths of all operations (A), compute (C), NCCL (N) and both (CN).

    compute = |C|; exposed comm = |C u N| - |C|; overlapped comm = |N| - exposed; memory only =
    |A| - |C u N|; idle = span - |A|. All sets come from one sorted pass over the unit's operations;
    a trace without NCCL kernels skips N and CN (then CN = C and N is empty).
    """
    has_nccl = trace.scalar("SELECT 1 FROM kernels WHERE category = 'nccl' LIMIT 1") is not None
    sets = {"a": (0, 1, 2), "c": (0,), **({"n": (1,), "cn": (0, 1)} if has_nccl else {})}
    cn = "COALESCE(cn_ns, 0)" if has_nccl else "COALESCE(c_ns, 0)"
    n = "COALESCE(n_ns, 0)" if has_nccl else "0"
    return f"""
        SELECT pid, device, a_s0 AS start_ns, a_s1 AS end_ns, a_ns, COALESCE(c_ns, 0) AS c_ns, {n} AS n_ns,
               {cn} AS cn_ns
        FROM ({union_lengths_sql(sets)})
    """  # noqa: S608 - composed from constants


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 3) if whole else 0.0


def breakdown(trace: Trace) -> dict[str, Any]:
    """Partition of the GPU-active span of every (process, device) of one report, and their sum.

    A device's span runs from its first GPU operation's start to its last one's end. Each instant of
    it is exactly one of: ``compute`` (a compute kernel runs), ``comm_exposed`` (an NCCL kernel runs
    and no compute kernel), ``memory_only`` (only copies/memsets), ``idle``. So
    ``compute_ns + comm_exposed_ns + memory_only_ns + idle_ns == span_ns`` holds per device and overall
    (the overall span is the sum of the device spans). ``comm_overlapped_ns`` is NCCL time that runs
    under compute, a part of ``compute_ns``. ``goodput_pct`` is ``compute_ns / span_ns`` in percent.

    Returns ``{compute_ns, comm_overlapped_ns, comm_exposed_ns, memory_only_ns, idle_ns, span_ns,
    goodput_pct, rank, devices: [{pid, device, rank, start_ns, end_ns, <same keys>}]}``; all ``*_ns``
    are ints. A report without GPU operations gets zeros and an empty ``devices`` list.
    """
    rank = trace.rank
    units: list[dict[str, Any]] = []
    if trace.has_rows("kernels") or trace.has_rows("memcpy") or trace.has_rows("memset"):
        table = temp_table(trace, "_gp_breakdown", _units_sql(trace))
        for pid, device, s0, s1, a, c, n, cn in trace.sql(f"SELECT * FROM {table} ORDER BY pid, device"):  # noqa: S608
            span, a, c, n, cn = int(s1 - s0), int(a), int(c), int(n), int(cn)
            unit = {"pid": pid, "device": device, "start_ns": int(s0), "end_ns": int(s1),
                    "compute_ns": c, "comm_overlapped_ns": n - (cn - c), "comm_exposed_ns": cn - c,
                    "memory_only_ns": a - cn, "idle_ns": span - a, "span_ns": span, "rank": rank}
            unit["goodput_pct"] = _pct(unit["compute_ns"], unit["span_ns"])
            units.append(unit)
    total = {k: sum(u[k] for u in units) for k in KEYS}
    total["goodput_pct"] = _pct(total["compute_ns"], total["span_ns"])
    total["rank"] = rank
    total["devices"] = units
    return total


def compact(bd: dict[str, Any]) -> dict[str, Any]:
    """The breakdown without the per-device list (what a report line in the CLI JSON carries first)."""
    return {k: v for k, v in bd.items() if k != "devices"}
