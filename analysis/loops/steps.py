"""Exact per-iteration records of a report's loop: what each iteration's GPU time was spent on.

An iteration runs from its start to the next one's start (the last one to its own end: the loop's
``durations``). Inside it, each instant of the chosen GPU unit is exactly one of ``compute`` (a compute
kernel runs), ``comm_exposed`` (an NCCL kernel runs and no compute kernel), ``memory_only`` (only
copies/memsets) and ``idle``: the breakdown's partition (``analysis.diagnosis.breakdown``), taken from the same
unions of intervals, clipped to the iteration. So ``compute_ns + comm_exposed_ns + memory_only_ns +
idle_ns == ns`` for every iteration, ``gpu_busy_ns`` is the union of all operations in it and
``comm_overlapped_ns`` the NCCL time under compute (a part of ``compute_ns``).

The unit is the loop's own (a kernel pattern is found on one (pid, device)), else the report's unit
with the most GPU operations. At ingest, before the file is published, the loop is found once and
every record of every iteration is written into the normalized file's ``iterations`` table, the loop's
other facts into ``meta['loop']`` (``write_iterations``); the analysis reads both from there
(``analysis.loops.phases.stored_loop``, ``stored``) and finds the loop and computes the records itself when the file
predates them (schema version 2).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from analysis.loops.phases import ITERATIONS_TABLE, Loop, find_loop, loop_warmup
from analysis.model.activity import UnitOps, reach_chunks
from analysis.model.intervals import COMPUTE, GPU_OPS_SQL, NCCL
from analysis.model.trace import Trace
from analysis.readers.schema import DERIVED_TABLES, ddl
from analysis.result_parts import StepRecord

TABLE = ITERATIONS_TABLE
PARTS = ("gpu_busy_ns", "compute_ns", "comm_exposed_ns", "comm_overlapped_ns", "memory_only_ns", "idle_ns")
COLUMNS = ("idx", "phase", "pid", "device", "start_ns", "end_ns", "own_end_ns", "ns", *PARTS)
_EMPTY = np.empty(0, dtype=np.int64)


_NONE = np.iinfo(np.int64).min


def _union_before(start: np.ndarray, end: np.ndarray, mask: np.ndarray | None, t: np.ndarray) -> np.ndarray:
    """Per time ``t[i]``, the length of the union of the intervals (sorted by start; ``mask``'s only) before it.

    With the ``p`` intervals that start at or before ``t`` (the later ones cover nothing before it), that is the
    union of those ``p``, ``U(p)``, less what of it lies after ``t``: all of ``(t, R(p)]``, ``R(p)`` their
    greatest end, since each starts at or before ``t``. ``U`` grows by ``max(0, end - max(start, R))`` per interval
    in start order. One pass in the chunks of ``activity.reach_chunks``, never a full-size copy: at 10M kernels the merged
    intervals and masked copies this replaced were 600 MiB, most of the loop finder's peak at ingest."""
    pos = np.searchsorted(start, t, side="right")  # the intervals that start at or before each t
    order = np.argsort(pos, kind="stable")
    sp = pos[order]
    out = np.zeros(len(t), dtype=np.int64)
    reach, total = _NONE, 0  # R and U of the intervals before the chunk
    done = int(np.searchsorted(sp, 0, side="right"))  # t before every interval: nothing before it
    for a, b, r in reach_chunks(end, len(start), mask):
        if done == len(sp):
            break
        before = np.empty_like(r)
        before[0], before[1:] = reach, r[:-1]
        grow = end[a:b] - np.maximum(start[a:b], before)
        np.maximum(grow, 0, out=grow)
        if mask is not None:
            grow[~mask[a:b]] = 0
        u = np.cumsum(grow)
        u += total
        upto = int(np.searchsorted(sp, b, side="right"))
        if upto > done:
            q = order[done:upto]
            last = sp[done:upto] - a - 1  # the last interval at or before each t, in this chunk
            rq, tq = r[last], t[q]
            out[q] = u[last] - np.where(rq > tq, rq - tq, 0)
            done = upto
        reach, total = int(r[-1]), int(u[-1])
    return out


def _union_in(u: UnitOps, mask: np.ndarray | None, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window ``[lo[i], hi[i])``, the length of the union of the unit's operations (``mask``'s only)
    inside it."""
    both = _union_before(u.start, u.end, mask, np.concatenate([hi, lo]))
    return both[:len(hi)] - both[len(hi):]


def parts(u: UnitOps, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """The breakdown's partition of each ``[lo[i], hi[i])`` on unit ``u`` (see the module docstring)."""
    a = _union_in(u, None, lo, hi)
    compute = u.cat == COMPUTE
    c = _union_in(u, compute, lo, hi)
    nccl = u.cat == NCCL
    if nccl.any():
        n = _union_in(u, nccl, lo, hi)
        cn = _union_in(u, compute | nccl, lo, hi)
    else:
        n, cn = np.zeros(len(lo), dtype=np.int64), c
    return {"gpu_busy_ns": a, "compute_ns": c, "comm_exposed_ns": cn - c, "comm_overlapped_ns": n - (cn - c),
            "memory_only_ns": a - cn, "idle_ns": (hi - lo) - a}


def record_unit(trace: Trace, loop: Loop) -> tuple[int | None, int | None] | None:
    """The (pid, device) the records are measured on: the loop's, else the one with the most GPU
    operations in the whole report (ties: the first in (pid, device) order)."""
    if loop.unit is not None:
        return loop.unit
    rows = trace.sql(f"""SELECT pid, device FROM ({GPU_OPS_SQL}) GROUP BY ALL
                         ORDER BY COUNT(*) DESC, pid, device LIMIT 1""")  # noqa: S608 - constants
    return (rows[0][0], rows[0][1]) if rows else None


def bounds(loop: Loop) -> tuple[np.ndarray, np.ndarray]:
    """Each iteration's [start, end): to the next one's start, the last one to its own end."""
    lo = loop.starts.astype(np.int64)
    return lo, lo + loop.durations


def compute(units: list[UnitOps], loop: Loop, unit: tuple[int | None, int | None] | None) -> dict[str, np.ndarray]:
    """The records of every iteration as columns (``COLUMNS``), measured on ``unit`` of ``units``
    (a windowed trace's units give the same numbers for the iterations that lie inside its window)."""
    lo, hi = bounds(loop)
    n = len(lo)
    w = loop_warmup(loop)
    u = next((x for x in units if (x.pid, x.device) == unit), None)
    if u is None:
        u = UnitOps(None if unit is None else unit[0], None if unit is None else unit[1], _EMPTY, _EMPTY,
                    np.empty(0, dtype=np.uint8))
    cols: dict[str, np.ndarray] = {
        "idx": np.arange(n, dtype=np.int32), "phase": np.where(np.arange(n) < w, "warmup", "steady"),
        "pid": np.full(n, -1 if u.pid is None else u.pid, dtype=np.int64),
        "device": np.full(n, -1 if u.device is None else u.device, dtype=np.int64),
        "start_ns": lo, "end_ns": hi, "own_end_ns": loop.ends.astype(np.int64), "ns": hi - lo, **parts(u, lo, hi)}
    return cols


def stored(trace: Trace, loop: Loop) -> dict[str, np.ndarray] | None:
    """The records written at ingest, when the file has them and they are this loop's (same iterations)."""
    if TABLE not in trace.tables:
        return None
    select = ", ".join(f"COALESCE({c}, -1) AS {c}" if c in ("pid", "device") else c for c in COLUMNS)
    cols = trace.arrays(f"SELECT {select} FROM {TABLE} ORDER BY idx")  # noqa: S608 - constants
    lo, hi = bounds(loop)
    if len(cols["idx"]) != len(lo) or not (np.array_equal(cols["start_ns"], lo) and np.array_equal(cols["end_ns"], hi)):
        return None
    return cols


def records(cols: dict[str, np.ndarray], keep: np.ndarray | None = None) -> list[StepRecord]:
    """The records of the columns (``keep``: the positions to turn into records, default all)."""
    idx = range(len(cols["idx"])) if keep is None else keep
    c = cols
    return [StepRecord(index=int(c["idx"][i]), phase=str(c["phase"][i]), start_ns=int(c["start_ns"][i]),
                       end_ns=int(c["end_ns"][i]), ns=int(c["ns"][i]), gpu_busy_ns=int(c["gpu_busy_ns"][i]),
                       compute_ns=int(c["compute_ns"][i]), comm_exposed_ns=int(c["comm_exposed_ns"][i]),
                       comm_overlapped_ns=int(c["comm_overlapped_ns"][i]),
                       memory_only_ns=int(c["memory_only_ns"][i]), idle_ns=int(c["idle_ns"][i])) for i in idx]


def _plain(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON")


def loop_json(loop: Loop) -> str:
    """The loop's facts besides its iterations' times, for ``meta['loop']``: source, signature, unit,
    detail, reason and the NVTX step summary (without its per-step list)."""
    from analysis.loops.iterations import compact

    # Several loops: each one's iterations (a few thousand integers at most per loop), the main one's by index.
    others = [{"source": x.source, "starts": x.starts.tolist(), "ends": x.ends.tolist(), "signature": x.signature,
               "unit": None if x.unit is None else list(x.unit), "detail": x.detail, "gpu_ns": x.gpu_ns,
               "main": x is loop} for x in loop.loops]
    return json.dumps({"source": loop.source, "signature": loop.signature,
                       "unit": None if loop.unit is None else list(loop.unit), "detail": loop.detail,
                       "reason": loop.reason, "nvtx": compact(loop.nvtx) if loop.nvtx else {},
                       "gpu_ns": loop.gpu_ns, "loops": others}, default=_plain)




def write_iterations(path: Path, memory_bytes: int, deadline: float | None = None) -> int:
    """Find the loop of the normalized report at ``path`` (not yet published) and write every
    iteration's record into its ``iterations`` table; returns the number of iterations. The table is
    written even when empty (a file with it is one whose records are known)."""
    from analysis.duck import connect
    from analysis.model.activity import unit_ops
    from analysis.readers.nsys.child import insert_meta

    trace = Trace(Path(path), Path(path).name, memory_bytes)
    try:
        loop = find_loop(trace)
        unit = record_unit(trace, loop) if len(loop) else None
        cols = compute(unit_ops(trace), loop, unit) if len(loop) else {
            k: np.empty(0, dtype=np.int64) for k in COLUMNS}
    finally:
        trace.close()
    if deadline is not None and time.monotonic() > deadline:
        from analysis.errors import TraceError

        raise TraceError("timeout", "the ingest ran past its time limit while finding the iterations")
    # Integer columns only (a NumPy array of strings makes DuckDB import pandas): the phase is written in SQL.
    data = {k: cols[k] for k in COLUMNS if k != "phase"}  # noqa: F841 - read by DuckDB's scan of `data`
    warmup = int(np.count_nonzero(cols["phase"] == "warmup")) if len(loop) else 0
    con = connect(path, memory_bytes=memory_bytes)
    try:
        con.execute(f"DROP TABLE IF EXISTS {TABLE}; DELETE FROM meta WHERE key = 'loop'")  # noqa: S608 - written again
        con.execute(ddl({TABLE: DERIVED_TABLES[TABLE]})[0])
        con.execute(f"""INSERT INTO {TABLE} SELECT idx::INTEGER, CASE WHEN idx < {warmup} THEN 'warmup' ELSE 'steady' END,
                        NULLIF(pid, -1)::INTEGER,
                        NULLIF(device, -1)::INTEGER, start_ns, end_ns, own_end_ns, ns, {', '.join(PARTS)} FROM data""")  # noqa: S608
        insert_meta(con, {"loop": loop_json(loop)})  # literals: a bound parameter would import pandas
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return len(loop)
