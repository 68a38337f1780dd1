"""A cause for each of GPU001's idle gaps, from what the device's launching threads did during it.

The launching threads of a device are those that launched any of its GPU operations (the idle anatomy's
speakers). During a gap, the time they spent in OS runtime calls and the time they spent in CUDA API calls
are measured as unions (a moment counts once however many calls or threads cover it). The cause is ``os_runtime`` when
OS runtime calls cover at least half of the gap and at least as much as CUDA API calls, else
``cuda_api`` when API calls cover at least half of it, else ``no_activity`` (the host was busy with
something the trace does not show: data loading, Python, CPU work).

The two unions come from the idle painting of the claims (``Claims.cover``: its compiled walk measures
them for the long gaps while it paints, from the calls it fetched anyway), so the calls are not fetched a
second time. Without that painting (no rule claims idle) they are measured here on NumPy arrays rather than
as an SQL range join: a join of every gap with every call of the process is quadratic in DuckDB (hours for
45k gaps and 23M calls) and still seconds as an IE join. The calls are fetched once, slice by slice of time
(bounded memory), merged into a union, and each gap's coverage is two binary searches into the union's
running total. Both ways give the same numbers (tests/analysis/test_gap_causes_painted.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from analysis.diagnosis.rules.base import Rule
from analysis.diagnosis.rules.nsys.idle_claims import claims
from analysis.model.trace import Trace

CAUSE_CODES = ("no_activity", "os_runtime", "cuda_api", "setup")
# Set-up work of any thread of the process: CUDA context, module and memory set-up calls, and NCCL
# communicator set-up (an NCCL call, seen as an NVTX range of NCCL's domain). Idle inside it is set-up.
SETUP_API_RE = (r"^cu(da)?(Malloc|HostAlloc|MallocHost|HostRegister|MemAlloc|MemHostAlloc|Module|Library|Init|"
                r"CtxCreate|DevicePrimaryCtx|SetDevice|DeviceSetLimit|GetDeviceCount)")
SETUP_NVTX_RE = r"^nccl(CommInit|CommSplit|GetUniqueId|CommInitRank|CommInitAll)"
SLICE_CALLS = 1 << 22  # calls fetched per slice of time at most (about; slices have equal lengths)

_LAUNCHERS_SQL = """
    SELECT DISTINCT pid, tid FROM kernels WHERE pid IS NOT NULL AND tid IS NOT NULL
    UNION SELECT DISTINCT pid, tid FROM memcpy WHERE pid IS NOT NULL AND tid IS NOT NULL
    UNION SELECT DISTINCT pid, tid FROM memset WHERE pid IS NOT NULL AND tid IS NOT NULL
"""


class DeviceGaps(NamedTuple):
    """The gaps of one device of a process, as arrays in time order."""

    device: int | None
    gap_start: np.ndarray
    gap_end: np.ndarray


class CausedGaps(NamedTuple):
    """One process's gaps of an owner: ``parts`` per device, and all of them (the parts' arrays concatenated in
    that order) with the cause of each as an index into ``CAUSE_CODES``."""

    pid: int | None
    parts: list[DeviceGaps]
    gap_start: np.ndarray
    gap_end: np.ndarray
    cause: np.ndarray
    kept: np.ndarray  # per gap, the time the owner keeps (less what rules that own idle by category took)


def launchers(trace: Trace) -> dict[int, list[int]]:
    """The launching threads of each process: pid -> tids."""
    out: dict[int, list[int]] = {}
    for pid, tid in trace.sql(_LAUNCHERS_SQL):
        out.setdefault(int(pid), []).append(int(tid))
    return out


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint pieces (in time order) of the union of intervals, and the covered time before each."""
    if not bool(np.all(start[1:] >= start[:-1])):  # calls come mostly in time order already
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    first = np.flatnonzero(np.r_[True, start[1:] > reach[:-1]])
    ps = start[first]
    pe = reach[np.r_[first[1:] - 1, len(start) - 1]]
    before = np.r_[0, np.cumsum(pe - ps)[:-1]]
    return ps, pe, before


def _covered_before(ps: np.ndarray, pe: np.ndarray, before: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Covered time of the union up to each ``t``."""
    k = np.searchsorted(ps, t, side="right") - 1
    inside = k >= 0
    out = np.zeros(len(t), dtype=np.int64)
    kk = k[inside]
    out[inside] = before[kk] + np.clip(t[inside] - ps[kk], 0, pe[kk] - ps[kk])
    return out


def coverage(trace: Trace, table: str, pid: int, tids: list[int] | None, gs: np.ndarray, ge: np.ndarray,
             extra: str = "") -> np.ndarray:
    """Per gap ``[gs, ge)`` of process ``pid``: the time covered by calls in ``table`` of threads ``tids``
    (None: any thread) that also match the SQL predicate ``extra`` (server-made)."""
    cov = np.zeros(len(gs), dtype=np.int64)
    if not len(gs) or tids == [] or not trace.has_rows(table):
        return cov
    lo, hi = int(gs.min()), int(ge.max())
    where = f"pid = {int(pid)} AND start_ns IS NOT NULL AND end_ns > start_ns"
    if tids is not None:
        where += f" AND tid IN ({', '.join(str(int(t)) for t in tids)})"
    if extra:
        where += f" AND ({extra})"
    # Every slice lies inside [lo, hi) and its calls are clipped to it below: the stored table serves.
    span = (f"SELECT start_ns, end_ns FROM {trace.stored(table, lo, hi)} WHERE {where} "  # noqa: S608
            "AND start_ns < {b} AND end_ns > {a}")
    # One slice when the calls fit in one (the usual case: no count first, which is a second scan); else
    # slices sized by their count.
    whole = trace.arrays(span.format(a=lo, b=hi) + f" LIMIT {SLICE_CALLS + 1}")
    if len(whole["start_ns"]) <= SLICE_CALLS:
        k = 1
    else:
        del whole
        n = int(trace.scalar(f"SELECT count(*) FROM ({span.format(a=lo, b=hi)})"))  # noqa: S608 - names, integers
        k = max(1, math.ceil(n / SLICE_CALLS))
    # Slice edges in integer arithmetic (Python ints): floats near absolute clocks (~2^62) are 1 us coarse.
    edges = [lo + (hi - lo) * i // k for i in range(k + 1)]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        part = np.flatnonzero((gs < b) & (ge > a))
        if not len(part) or b <= a:
            continue
        d = whole if k == 1 else trace.arrays(span.format(a=a, b=b))
        if not len(d["start_ns"]):
            continue
        ps, pe, before = _union(np.maximum(d["start_ns"], a), np.minimum(d["end_ns"], b))
        x, y = np.maximum(gs[part], a), np.minimum(ge[part], b)
        cov[part] += _covered_before(ps, pe, before, y) - _covered_before(ps, pe, before, x)
    return cov


def gap_causes(trace: Trace, pid: int | None, gs: np.ndarray, ge: np.ndarray, tids: list[int] | None,
               cover: np.ndarray | None = None) -> np.ndarray:
    """The cause of each gap of one device of process ``pid`` as an index into ``CAUSE_CODES`` (see the module
    docstring) from the calls of its launching threads ``tids``, set-up left out (``set_up``: it looks at
    every thread of the process, once for all its devices). ``cover``: per gap, the time their CUDA API and OS
    runtime calls cover, when the idle painting measured it (``Claims.cover``); else measured here."""
    code = np.zeros(len(gs), dtype=np.int8)
    if pid is None or not tids:
        return code
    if cover is not None:
        api_ns, os_ns = cover[:, 0], cover[:, 1]
    else:
        os_ns = coverage(trace, "osrt", pid, tids, gs, ge)
        api_ns = coverage(trace, "cuda_api", pid, tids, gs, ge)
    gap = ge - gs
    code[2 * api_ns >= gap] = 2
    code[(os_ns >= api_ns) & (2 * os_ns >= gap)] = 1
    return code


def set_up(trace: Trace, pid: int, gs: np.ndarray, ge: np.ndarray, code: np.ndarray) -> None:
    """Mark ``setup`` (the most specific cause: idle while the process sets itself up) in ``code`` for the gaps
    of process ``pid`` (any of its devices) that its set-up work covers at least half of."""
    setup = _setup_coverage(trace, pid, gs, ge)
    code[2 * setup >= ge - gs] = CAUSE_CODES.index("setup")


def _setup_coverage(trace: Trace, pid: int, gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
    """Per gap, the time covered by set-up work of any thread of the process (the larger of the CUDA
    set-up calls' and the NCCL set-up ranges' coverage)."""
    from analysis.diagnosis.rules.nsys.common import api_name_in

    out = np.zeros(len(gs), dtype=np.int64)
    api = api_name_in(trace, SETUP_API_RE)
    if api != "FALSE":
        out = coverage(trace, "cuda_api", pid, None, gs, ge, api)
    if trace.has_rows("nvtx"):
        pred = f"kind <> 'mark' AND regexp_matches(text, '{SETUP_NVTX_RE}')"
        out = np.maximum(out, coverage(trace, "nvtx", pid, None, gs, ge, pred))
    return out


def cause_names(trace: Trace, gaps: Sequence[tuple[int | None, int, int, str]],
                tids: dict[int, list[int]]) -> list[str | None]:
    """For a bounded list of (pid, gap_start, gap_end, cause), the call of the launching threads that
    covers most of the gap in the cause's table (None for ``no_activity``)."""
    out: list[str | None] = [None] * len(gaps)
    for cause, table in (("os_runtime", "osrt"), ("cuda_api", "cuda_api"), ("setup", "cuda_api")):
        pick = [(i, p, s, e) for i, (p, s, e, c) in enumerate(gaps) if c == cause and p is not None and p in tids]
        if not pick:
            continue
        values = ", ".join(f"({i}, {int(p)}, {int(s)}, {int(e)})" for i, p, s, e in pick)
        threads = ", ".join(f"({int(p)}, {int(t)})" for p in {p for _, p, _, _ in pick} for t in tids[p])
        rows = trace.sql(f"""
            WITH pts(i, pid, gs, ge) AS (VALUES {values}), th(pid, tid) AS (VALUES {threads})
            SELECT i, arg_max(x.name, LEAST(x.end_ns, pts.ge) - GREATEST(x.start_ns, pts.gs))
            FROM pts JOIN {table} x ON x.pid = pts.pid AND x.start_ns < pts.ge AND x.end_ns > pts.gs
            SEMI JOIN th ON th.pid = x.pid AND th.tid = x.tid
            GROUP BY i""")  # noqa: S608 - integers and table names
        for i, name in rows:
            out[i] = name
    return out


def owned_gap_causes(trace: Trace, units: list, code: int, claimers: Sequence[type[Rule]],
                     long_ns: int | None = None) -> list[CausedGaps]:
    """The gaps of owner ``code`` (GPU001's) with their causes, per process; each device's gaps judged by the
    threads that launched its work (``analysis.diagnosis.idle_anatomy.speakers``).

    ``long_ns``: the owner's gaps are exactly the gaps at least that long (GPU001's ``min_gap_us``); the idle
    painting of the claims measured what CUDA and OS calls covered in each (``Claims.cover``), so they are not
    fetched again. Without it, or without that painting, the calls are fetched here (one pass per device).
    Cached on the trace for the ``units`` given (the owner table of one set of ownership thresholds), since
    GPU001 and HOST001 both read it.
    """
    from analysis.diagnosis.idle_anatomy import speakers

    key = ("owned_gap_causes", id(units), code, long_ns)
    if key in trace.memo:
        return trace.memo[key]
    sp = speakers(trace)
    painted = _painted_cover(trace, units, code, claimers, long_ns)
    per_pid: dict[int | None, list[DeviceGaps]] = {}
    kept: dict[int | None, list[np.ndarray]] = {}
    causes: dict[int | None, list[np.ndarray]] = {}
    judged: dict[int | None, list[np.ndarray]] = {}  # per gap: its device's launching threads are known
    for i, u in enumerate(units):
        m = u.owner == code
        if m.any():
            pid, dev = u.unit.pid, u.unit.device
            gs, ge = u.gap_start[m], u.gap_end[m]
            tids = sp.get((pid, dev)) if pid is not None else None
            per_pid.setdefault(pid, []).append(DeviceGaps(dev, gs, ge))
            kept.setdefault(pid, []).append(u.kept(m))
            causes.setdefault(pid, []).append(gap_causes(trace, pid, gs, ge, tids,
                                                         painted[i] if painted is not None else None))
            judged.setdefault(pid, []).append(np.full(len(gs), pid is not None and bool(tids)))
    out = []
    for pid, parts in per_pid.items():
        gs = np.concatenate([g.gap_start for g in parts])
        ge = np.concatenate([g.gap_end for g in parts])
        code_ = np.concatenate(causes[pid])
        named = np.concatenate(judged[pid])
        if pid is not None and named.any():  # set-up, once per process, for the devices with launching threads
            sub = code_[named]
            set_up(trace, pid, gs[named], ge[named], sub)
            code_[named] = sub
        out.append(CausedGaps(pid, parts, gs, ge, code_, np.concatenate(kept[pid])))
    trace.memo[key] = out
    return out


def _painted_cover(trace: Trace, units: list, code: int, claimers: Sequence[type[Rule]],
                   long_ns: int | None) -> list[np.ndarray | None] | None:
    """Per unit, the claims painting's CUDA and OS cover of the owner's gaps (its long gaps), or None when
    there is no such painting (no rule claims idle) or it does not match the owner's gaps one for one."""
    if long_ns is None:
        return None
    cl = claims(trace, claimers, long_ns)
    if len(cl.cover) != len(units):
        return None
    out: list[np.ndarray | None] = []
    for u, cov in zip(units, cl.cover, strict=True):
        m = u.owner == code
        if cov is None:
            if m.any() and u.unit.pid is not None:
                return None
            out.append(None)
        elif len(cov) != int(m.sum()) or not bool(np.array_equal(m, (u.gap_end - u.gap_start) >= long_ns)):
            return None
        else:
            out.append(cov)
    return out
