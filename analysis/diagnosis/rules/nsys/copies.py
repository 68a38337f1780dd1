"""Copies joined with their CUDA API calls, once per open trace, for MEM001, MEM002 and the gap owner table.

The join of ``memcpy`` with ``cuda_api`` (process + correlation id) reads every API call of the report
(tens of millions of rows); it runs once, keeps only the copies some rule needs (pageable memory on
either side, or a blocking call) as NumPy arrays, and each rule reads its counts, sums and top copies
from them. The top copies' details (names, kinds, streams) are fetched afterwards by row id.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.diagnosis.rules.nsys.common import api_name_in
from analysis.model.activity import top_order
from analysis.model.trace import Trace

# Synchronous memcpy calls of the runtime and driver APIs (RE2 has no lookahead: "Async" is excluded
# separately).
COPY_CALL_RE = r"^cu(da)?Memcpy"

# A copy blocks the host when its call is a synchronous memcpy, with NVIDIA's exclusions: copies within
# one device, and host-to-device copies of at most 64 KiB (the driver stages those and returns at once).
# ``{copy_calls}`` is the IN-list of the synchronous memcpy call names.
_BLOCKING = """{copy_calls} AND NOT contains(a.name, 'Async')
      AND NOT (m.copy_kind = 'DtoD' AND (m.src_device IS NULL OR m.src_device = m.dst_device))
      AND NOT (m.copy_kind = 'HtoD' AND m.bytes <= 65536)"""

_COPY_CALLS_SQL = """
    SELECT * FROM (
        SELECT m.rowid AS mrow, COALESCE(a.rowid, -1) AS arow,
               COALESCE(m.start_ns, 0) AS op_start, COALESCE(m.end_ns - m.start_ns, 0) AS op_ns,
               COALESCE(m.bytes, 0) AS bytes,
               COALESCE(m.src_kind = 'pageable' OR m.dst_kind = 'pageable', FALSE) AS pageable,
               COALESCE(contains(a.name, 'Async'), FALSE) AS is_async,
               COALESCE({blocking}, FALSE) AS blocking,
               (a.pid IS NOT NULL AND a.start_ns IS NOT NULL AND a.end_ns IS NOT NULL) AS call_ok,
               COALESCE(a.pid, 0) AS call_pid, COALESCE(a.start_ns, 0) AS call_start,
               COALESCE(a.end_ns, 0) AS call_end, COALESCE(a.end_ns - a.start_ns, 0) AS call_ns
        FROM memcpy m LEFT JOIN cuda_api a ON a.pid = m.pid AND a.correlation_id = m.correlation_id)
    WHERE pageable OR blocking
"""

TOP = 20


@dataclass(frozen=True)
class CopySet:
    """Counts and sums of one kind of copy, and the row ids of its ``TOP`` longest (longest first)."""

    count: int
    op_ns: int
    call_ns: int
    bytes: int
    async_count: int
    async_op_ns: int
    top_rows: tuple[tuple[int, int], ...]  # (memcpy rowid, cuda_api rowid or -1)


@dataclass(frozen=True)
class CopyCalls:
    pageable: CopySet  # ranked by the copy's GPU time
    blocking: CopySet  # ranked by the call's host time
    # The blocking calls with a process and both times, for the owner table.
    blocking_pid: np.ndarray
    blocking_start: np.ndarray
    blocking_end: np.ndarray


def _empty_set() -> CopySet:
    return CopySet(0, 0, 0, 0, 0, 0, ())


def _copy_set(d: dict[str, np.ndarray], m: np.ndarray, ns: str, start: str) -> CopySet:
    idx = np.flatnonzero(m)
    top = idx[top_order(d[ns][idx], d[start][idx], TOP)]
    a = d["is_async"][idx]
    return CopySet(
        count=len(idx), op_ns=int(d["op_ns"][idx].sum()), call_ns=int(d["call_ns"][idx].sum()),
        bytes=int(d["bytes"][idx].sum()), async_count=int(a.sum()), async_op_ns=int(d["op_ns"][idx][a].sum()),
        top_rows=tuple((int(d["mrow"][i]), int(d["arow"][i])) for i in top))


def copy_calls(trace: Trace) -> CopyCalls:
    """The pageable and the blocking copies of the report (see the module docstring); cached on the trace."""
    cached = trace.memo.get("copy_calls")
    if cached is not None:
        return cached
    empty = np.empty(0, dtype=np.int64)
    if not trace.has_rows("memcpy"):
        out = CopyCalls(_empty_set(), _empty_set(), empty, empty, empty)
    else:
        calls = api_name_in(trace, COPY_CALL_RE, "a.name")
        blocking = "FALSE" if calls == "FALSE" else _BLOCKING.format(copy_calls=calls)
        d = trace.arrays(_COPY_CALLS_SQL.format(blocking=blocking))
        b = d["blocking"]
        ok = b & d["call_ok"]
        out = CopyCalls(pageable=_copy_set(d, d["pageable"], "op_ns", "op_start"),
                        blocking=_copy_set(d, b, "call_ns", "call_start"),
                        blocking_pid=d["call_pid"][ok].astype(np.int64), blocking_start=d["call_start"][ok],
                        blocking_end=d["call_end"][ok])
        del d
    trace.memo["copy_calls"] = out
    return out


def top_copy_rows(trace: Trace, rows: tuple[tuple[int, int], ...], columns: str) -> list[tuple]:
    """``columns`` (over ``m``: memcpy and ``a``: its API call, NULL when none) of the copies ``rows``,
    in the given order."""
    if not rows:
        return []
    values = ", ".join(f"({i}, {int(m)}, {int(a)})" for i, (m, a) in enumerate(rows))
    return trace.sql(f"""
        SELECT {columns} FROM (VALUES {values}) v(i, mrow, arow)
        JOIN memcpy m ON m.rowid = v.mrow LEFT JOIN cuda_api a ON a.rowid = v.arow
        ORDER BY v.i""")  # noqa: S608 - integers and constant column lists
