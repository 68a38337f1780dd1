"""Where a report's GPU time goes: an exact partition of each device's active span from interval unions."""

from __future__ import annotations

from typing import Any

from analysis.intervals import segments_table
from analysis.trace import Trace

PARTS = ("compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns")
KEYS = ("compute_ns", "comm_overlapped_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "span_ns")

BREAKDOWN_SQL = """
    SELECT pid, device, MIN(seg_start) AS start_ns, MAX(seg_end) AS end_ns,
           SUM(seg_ns) FILTER (WHERE nc > 0) AS compute_ns,
           SUM(seg_ns) FILTER (WHERE nc > 0 AND nn > 0) AS comm_overlapped_ns,
           SUM(seg_ns) FILTER (WHERE nc = 0 AND nn > 0) AS comm_exposed_ns,
           SUM(seg_ns) FILTER (WHERE nc = 0 AND nn = 0 AND nm > 0) AS memory_only_ns,
           SUM(seg_ns) FILTER (WHERE nc = 0 AND nn = 0 AND nm = 0) AS idle_ns,
           SUM(seg_ns) AS span_ns
    FROM _gp_segments GROUP BY pid, device ORDER BY pid, device
"""  # profiler overhead alone counts as idle here (it is busy only for gap finding)


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
        cols = ("pid", "device", "start_ns", "end_ns", *KEYS)
        segments_table(trace)
        for row in trace.sql(BREAKDOWN_SQL):
            unit = {k: (int(v) if v is not None else 0) if k not in ("pid", "device") else v
                    for k, v in zip(cols, row, strict=True)}
            unit["rank"] = rank
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
