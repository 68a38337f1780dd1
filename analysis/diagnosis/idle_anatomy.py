"""Idle anatomy: every idle instant of every device painted with what its host threads were doing then.

The idle of a device is the breakdown's (``analysis.diagnosis.breakdown``): its span minus the union of its GPU
operations, as the gaps of the pairing over its sorted operations (``analysis.model.activity.pairing``, no
profiler overhead). Each instant of it gets exactly one category of ``analysis.diagnosis.idle_classes.CATEGORIES``,
the most specific that covers it, and the name of the call, range or sampled function behind it, so the
categories of a device add up exactly to its idle, per phase and per iteration (any cut points).

Who speaks for a device: the threads that launched its GPU operations (its kernels, copies and memsets;
any thread of the process when the export does not name the launching thread). All their activity counts
together and an instant covered by two of them counts once, for the more specific category. What covers
an instant, most specific first: a CUDA API call (classified by name), a communication NVTX range (MPI,
NCCL, UCX, NVSHMEM domains or call names; NCCL communicator set-up apart), an NVTX range naming compilation
(``jit_module``), an OS runtime call, a user NVTX range, a CPU sample of the thread (each sample stands for half the thread's sampling period either side,
named by its innermost function), a unified-memory migration burst of the device (``uvm_migration``: the idle
between two page migrations, ``uvm_gaps``), the thread switched out by the scheduler (``off_cpu``: the
normalized ``off_cpu`` stretches, named by what it blocked on when the export says, else "off CPU"; only when
the launching threads are known), else nothing recorded (``none``).

The painting is one walk per slice of time (bounded rows): the idle pieces cut at the bins' starts and the
covering intervals in start order, walked together by compiled code (``analysis.diagnosis.sweep``), which
keeps per category the interval reaching furthest and accounts for each painted stretch at once (per bin
and category, per claimed piece, per long piece, and per (bin, category, name) with the calls). While it
paints the long gaps it also measures what the speaking threads' CUDA calls and OS calls cover in each
(``Painted.cover``), what GPU001 judges its gaps' causes by, so those calls are fetched once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypedDict

import numpy as np

from analysis.diagnosis.idle_classes import (
    CATEGORIES,
    CODE,
    NONE,
    NVTX_COMM_DOMAIN_RE,
    NVTX_COMM_TEXT_RE,
    NVTX_JIT_RE,
    NVTX_NCCL_SETUP_RE,
    OFF_CPU_NAME_SQL,
    cuda_class,
    os_class,
)
from analysis.diagnosis.sweep import lookup, sweep
from analysis.model.activity import pairing, unit_ops
from analysis.model.trace import Trace
from analysis.result_parts import IdleAnatomy, IdleCategory, IdleName

NCAT = len(CATEGORIES)
SLICE_ROWS = 1 << 20  # host rows fetched per slice of time, about (slices have equal lengths): bounds memory
TOP = 5  # names kept per category
_EMPTY = np.empty(0, dtype=np.int64)

_LAUNCHERS_SQL = """
    SELECT DISTINCT pid, device, tid FROM kernels WHERE pid IS NOT NULL AND tid IS NOT NULL
    UNION SELECT DISTINCT pid, device, tid FROM memcpy WHERE pid IS NOT NULL AND tid IS NOT NULL
    UNION SELECT DISTINCT pid, device, tid FROM memset WHERE pid IS NOT NULL AND tid IS NOT NULL
"""


def speakers(trace: Trace) -> dict[tuple[int, int | None], list[int]]:
    """The threads that speak for each (pid, device): those that launched its GPU operations."""
    key = "anatomy_speakers"
    if key not in trace.memo:
        out: dict[tuple[int, int | None], list[int]] = {}
        for pid, dev, tid in trace.sql(_LAUNCHERS_SQL):
            out.setdefault((int(pid), None if dev is None else int(dev)), []).append(int(tid))
        trace.memo[key] = {k: sorted(v) for k, v in out.items()}
    return trace.memo[key]


@dataclass
class Painted:
    """Per cut bin: ns per category (``ns[bin, code]``) and per (bin, code, name hash) the ns and the number of
    distinct calls, ranges or samples that covered idle."""

    bins: int
    ns: np.ndarray = field(init=False)
    names: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    # Optional: ``take[bin, code]`` marks the (bin, category) pairs a rule claims; ``taken`` is then, per idle
    # piece given to ``paint``, the time of it in claimed pairs.
    take: np.ndarray | None = None
    taken: np.ndarray = field(default_factory=lambda: _EMPTY)
    # Optional: the painting of other idle pieces done in the same pass (``paint(extra=...)``), kept apart.
    extra: Painted | None = None
    # Optional: ``long`` marks idle pieces given to ``paint`` (bool per piece); ``long_ns`` is then, per
    # category, their time that no claim takes (``take``): what the owner of long gaps keeps, by category.
    long: np.ndarray | None = None
    long_ns: np.ndarray = field(default_factory=lambda: np.zeros(NCAT, dtype=np.int64))
    # With ``long``: per long piece (in order), the time CUDA API calls and OS runtime calls of the speaking
    # threads cover (``cover[:, 0]``, ``cover[:, 1]``; unions, whatever category paints the instant): what
    # GPU001 judges its gaps' causes by (``analysis.diagnosis.rules.nsys.causes``).
    cover: np.ndarray | None = None
    cover_pieces: np.ndarray | None = None  # the long pieces (positions among those given to ``paint``), per row

    def plus(self, other: Painted | None) -> Painted:
        """The sum of two paintings with the same bins (names merged)."""
        if other is None:
            return self
        out = Painted(self.bins)
        out.ns = self.ns + other.ns
        for src in (self.names, other.names):
            for k, (ns, calls) in src.items():
                acc = out.names.setdefault(k, [0, 0])
                acc[0] += ns
                acc[1] += calls
        return out

    def __post_init__(self) -> None:
        self.ns = np.zeros((self.bins, NCAT), dtype=np.int64)


def _name_codes(trace: Trace, table: str, classify) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """The distinct names of ``table``: sorted hashes, their category codes, and hash -> name."""
    key = ("anatomy_names", table)
    if key not in trace.memo:
        # The stored table's names (a superset of a window's): a lookup table, read once.
        rows = trace.sql(f"SELECT hash(name), name FROM (SELECT DISTINCT name FROM {trace.stored(table)} "  # noqa: S608
                         "WHERE name IS NOT NULL)")
        rows.sort()
        h = np.array([int(r[0]) for r in rows], dtype=np.uint64)
        codes = np.array([classify(r[1]) for r in rows], dtype=np.uint8)
        trace.memo[key] = (h, codes, {int(r[0]): str(r[1]) for r in rows})
    return trace.memo[key]


class Slots(NamedTuple):
    """The (category, name) pairs of a set of intervals: ``slot`` per interval, an index into ``cat``/``name``."""

    slot: np.ndarray
    cat: np.ndarray
    name: np.ndarray


def slots(cat: np.ndarray, name: np.ndarray) -> Slots:
    """Each interval's (category, name hash) pair as a dense index (two sorts; a table lookup is cheaper where
    the names are known, ``_table_slots``)."""
    if not len(cat):
        return Slots(_EMPTY, np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.uint64))
    u, inv = np.unique(name, return_inverse=True)
    pair, slot = np.unique(inv.astype(np.int64) * NCAT + cat, return_inverse=True)
    return Slots(slot.astype(np.int64), (pair % NCAT).astype(np.uint8), u[pair // NCAT].astype(np.uint64))


def _table_slots(hashes: np.ndarray, table_h: np.ndarray, table_c: np.ndarray,
                 default: int) -> tuple[np.ndarray, Slots]:
    """Category codes of names looked up in a dictionary of the table's names (sorted hashes and their codes;
    ``default`` for a hash not in it: a null name), and their slots: the dictionary's position, or past it."""
    if not len(table_h):
        return np.full(len(hashes), default, dtype=np.uint8), slots(np.full(len(hashes), default, np.uint8), hashes)
    codes, i = lookup(table_h, table_c, hashes, default)
    table_c = table_c.astype(np.uint8)
    found = i >= 0
    if found.all():  # the usual case: the dictionary holds every name of its table
        return codes, Slots(i, table_c, table_h.astype(np.uint64))
    rest = slots(codes[~found], hashes[~found])
    i[~found] = rest.slot + len(table_h)
    return codes, Slots(i, np.concatenate((table_c, rest.cat)), np.concatenate((table_h.astype(np.uint64), rest.name)))


def _join_slots(parts: Sequence[Slots]) -> Slots:
    """Several sources' slots as one table (each source's indices moved past the previous sources')."""
    off = np.cumsum([0] + [len(p.cat) for p in parts])
    return Slots(np.concatenate([p.slot + o for p, o in zip(parts, off, strict=False)]),
                 np.concatenate([p.cat for p in parts]), np.concatenate([p.name for p in parts]))


def _threads(pid: int, tids: list[int] | None) -> str:
    cond = f"pid = {int(pid)}"
    return cond + (f" AND tid IN ({', '.join(str(int(t)) for t in tids)})" if tids else "")


def _half_periods(trace: Trace, pid: int, tids: list[int] | None) -> dict[int, int]:
    """Half the sampling period of each sampled thread (the median distance between its samples)."""
    key = ("anatomy_periods", pid, tuple(tids or ()))
    if key not in trace.memo:
        rows = trace.sql(f"""
            SELECT tid, median(d)::BIGINT FROM (
                SELECT tid, start_ns - lag(start_ns) OVER (PARTITION BY tid ORDER BY start_ns) AS d
                FROM cpu_samples WHERE {_threads(pid, tids)} AND start_ns IS NOT NULL)
            WHERE d > 0 GROUP BY tid""")  # noqa: S608 - integers
        trace.memo[key] = {int(t): int(p) // 2 for t, p in rows if p}
    return trace.memo[key]


def _uvm_where(pid: int, device: int | None) -> str:
    dev = "NULL" if device is None else str(int(device))
    return f"pid = {int(pid)} AND device IS NOT DISTINCT FROM {dev} AND start_ns IS NOT NULL AND end_ns >= start_ns"


def uvm_gaps(trace: Trace, pid: int, device: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The device's migration bursts: (start, end, name hash) of each stretch between a unified-memory page
    migration and the next GPU operation when that one is a migration too (operations in start order; the
    stretch starts at the furthest end so far, so it holds only idle). Named by the following migration's
    kind (``UVM_HtoD``, ``UVM_DtoH``). Empty without migrations."""
    key = ("anatomy_uvm", pid, device)
    if key not in trace.memo:
        out = (_EMPTY, _EMPTY, np.empty(0, dtype=np.uint64))
        if (pid, device) in _uvm_units(trace):
            where = _uvm_where(pid, device)
            ops = [f"SELECT start_ns, end_ns, COALESCE(copy_kind LIKE 'UVM%', FALSE) AS uvm, "  # noqa: S608 - integers
                   f"COALESCE(hash(copy_kind), 0)::UBIGINT AS h FROM memcpy WHERE {where}"]
            ops += [f"SELECT start_ns, end_ns, FALSE, 0::UBIGINT FROM {t} WHERE {where}"  # noqa: S608 - constants
                    for t in ("kernels", "memset") if trace.has_rows(t)]
            d = trace.arrays(f"""
                SELECT start_ns, end_ns, h FROM (
                    SELECT MAX(end_ns) OVER w AS start_ns, start_ns AS end_ns, uvm,
                           LAG(uvm) OVER (ORDER BY start_ns, end_ns) AS prev_uvm, h
                    FROM ({" UNION ALL ".join(ops)})
                    WINDOW w AS (ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))
                WHERE uvm AND prev_uvm AND end_ns > start_ns""")  # noqa: S608 - constants, integers
            out = (d["start_ns"].astype(np.int64), d["end_ns"].astype(np.int64), d["h"].astype(np.uint64))
            if len(out[0]):
                names = trace.memo.setdefault(("anatomy_names", "uvm"), (None, None, {}))[2]
                names.update({int(h): str(n) for h, n in trace.sql(
                    "SELECT DISTINCT hash(copy_kind), copy_kind FROM memcpy WHERE copy_kind LIKE 'UVM%'")})
        trace.memo[key] = out
    return trace.memo[key]


# The name of the idle between two migrations to the host while the host ran (on the CPU): the host working on the
# pages it just faulted back (MEM004 owns it, and does not count it as the migrations' cost).
HOST_WORK_SUFFIX = ", host on CPU"


def _complement(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The instants outside the sorted disjoint intervals ``[s, e)`` (as sorted disjoint intervals)."""
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    cs, ce = np.concatenate(([lo], e)), np.concatenate((s, [hi]))
    keep = ce > cs
    return cs[keep], ce[keep]


def _union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the same instants as ``[s, e)`` (any order, may overlap)."""
    if not len(s):
        return _EMPTY, _EMPTY
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=np.bool_)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def _clip(a: tuple[np.ndarray, np.ndarray, np.ndarray], bs: np.ndarray,
          be: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The parts of the named intervals ``a`` (sorted, disjoint) inside ``[bs, be)`` (sorted, disjoint), and
    per part the end of the interval of ``a`` it comes from."""
    i = np.searchsorted(be, a[0], side="right")  # the first b interval that ends after each a starts
    out_s, out_e, out_h, out_g = [], [], [], []
    for s, e, h, j in zip(a[0].tolist(), a[1].tolist(), a[2].tolist(), i.tolist(), strict=True):
        while j < len(bs) and bs[j] < e:
            lo, hi = max(s, int(bs[j])), min(e, int(be[j]))
            if hi > lo:
                out_s.append(lo)
                out_e.append(hi)
                out_h.append(h)
                out_g.append(e)
            j += 1
    out = (np.array(out_s, dtype=np.int64), np.array(out_e, dtype=np.int64), np.array(out_h, dtype=np.uint64))
    return out, np.array(out_g, dtype=np.int64)


def _host_side(trace: Trace, gaps: tuple[np.ndarray, np.ndarray, np.ndarray], pid: int,
               tids: list[int]) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """``gaps`` (``uvm_gaps``) with the idle before each migration to the host split by what the host did (issue
    #39): a host that touches a device-resident managed page faults, waits while the driver migrates it (switched
    out, off CPU) and then works on the data; the instants none of the speaking threads was switched out are that
    work and are renamed ``<kind>, host on CPU`` (``HOST_WORK_SUFFIX``); the rest keep the migration's name.
    Also returned: per piece, the end of the gap it comes from (its migration's start), so that a gap split into
    pieces counts as one migration, not one per piece (issue #39, class 7)."""
    names = trace.memo[("anatomy_names", "uvm")][2]
    to_host = {h for h, n in names.items() if n == "UVM_DtoH"}
    back = np.isin(gaps[2], np.array(sorted(to_host), dtype=np.uint64))
    if not back.any():
        return gaps, gaps[1].copy()
    d = trace.arrays(f"SELECT start_ns, end_ns FROM off_cpu WHERE {_threads(pid, tids)} AND end_ns > start_ns "  # noqa: S608 - integers
                     f"AND start_ns < {int(gaps[1][back].max())} AND end_ns > {int(gaps[0][back].min())}")
    os_, oe = _union(d["start_ns"].astype(np.int64), d["end_ns"].astype(np.int64))
    sub = (gaps[0][back], gaps[1][back], gaps[2][back])
    waited, wg = _clip(sub, os_, oe)
    worked, kg = _clip(sub, *_complement(os_, oe))
    renamed = {}
    for h in to_host:
        label = names[h] + HOST_WORK_SUFFIX
        renamed[h] = int(trace.scalar("SELECT hash($n)::UBIGINT", {"n": label}))
        names[renamed[h]] = label
    wh = np.array([renamed[int(h)] for h in worked[2].tolist()], dtype=np.uint64)
    s = np.concatenate((gaps[0][~back], waited[0], worked[0]))
    e = np.concatenate((gaps[1][~back], waited[1], worked[1]))
    h = np.concatenate((gaps[2][~back], waited[2], wh))
    g = np.concatenate((gaps[1][~back], wg, kg))
    o = np.argsort(s, kind="stable")
    return (s[o], e[o], h[o]), g[o]


def _off_cpu_names(trace: Trace) -> dict[int, str]:
    """The names off-CPU stretches paint with (``OFF_CPU_NAME_SQL``), by hash; kept for ``resolve_names``."""
    key = ("anatomy_names", "off_cpu")
    if key not in trace.memo:
        rows = trace.sql(f"SELECT DISTINCT hash({OFF_CPU_NAME_SQL}), {OFF_CPU_NAME_SQL} FROM off_cpu")  # noqa: S608 - constants
        trace.memo[key] = (None, None, {int(h): str(n) for h, n in rows})
    return trace.memo[key][2]


def _uvm_units(trace: Trace) -> set[tuple[int, int | None]]:
    """The (pid, device) pairs with unified-memory migrations: only those have bursts (the window query over
    all of a device's GPU operations in ``uvm_gaps`` is skipped for the others, most devices)."""
    if "anatomy_uvm_units" not in trace.memo:
        rows = trace.sql("SELECT DISTINCT pid, device FROM memcpy WHERE copy_kind LIKE 'UVM%' AND pid IS NOT NULL"
                         ) if trace.has_rows("memcpy") else []
        trace.memo["anatomy_uvm_units"] = {(int(p), None if d is None else int(d)) for p, d in rows}
    return trace.memo["anatomy_uvm_units"]


def innermost(s: np.ndarray, e: np.ndarray, c: np.ndarray, h: np.ndarray, tid: np.ndarray,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """NVTX ranges (start, end, category, name hash, thread) cut so that each instant of a thread and category is
    named by the innermost range covering it, the one started last (issue #39, class 6: power-iteration's 44 'IO N'
    ranges inside its one 'Loop' range own the idle, not 'Loop'): per range the pieces outside the ranges opened
    inside it, each with the range's start as its group (one range, one call: ``paint_intervals``). The ranges as
    they are, and no groups, when no two of one thread and category overlap."""
    if len(s) < 2:
        return s, e, c, h, None
    if not bool((e > s).all()):  # an empty range names no instant
        k = e > s
        s, e, c, h, tid = s[k], e[k], c[k], h[k], tid[k]
    tid = tid.astype(np.int64)
    o = np.lexsort((-e.astype(np.int64), s, c, tid))  # per thread and category, by start (outer first on a tie)
    ss, ee, cc, tt = s[o].astype(np.int64), e[o].astype(np.int64), c[o], tid[o]
    same = (tt[1:] == tt[:-1]) & (cc[1:] == cc[:-1])
    # The running furthest end runs across keys too: it can only see an overlap that is not there (the cut is then
    # the ranges themselves, in pieces that count once), never miss one.
    reach = np.maximum.accumulate(ee)
    if not bool((same & (ss[1:] < reach[:-1])).any()):
        return s, e, c, h, None
    hh = h[o]
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    pieces = [_nested_pieces(ss[k0:k1], ee[k0:k1]) for k0, k1 in zip(starts.tolist(), [*starts[1:].tolist(), len(ss)],
                                                                      strict=True)]
    if all(x is not None for x in pieces):
        ps, pe, pi = (np.concatenate([x[j] + (k0 if j == 2 else 0) for x, k0 in zip(pieces, starts.tolist(), strict=True)
                                      if x is not None]) for j in range(3))
        return ps, pe, cc[pi], hh[pi], ss[pi]
    return _stacked_pieces(ss, ee, cc, hh, same)


def _nested_pieces(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For ranges sorted by start (outer first on a tie) that nest properly: the pieces (start, end, range) in which
    each range is the innermost one open, in time order. None when two ranges cross (neither holds the other)."""
    n = len(s)
    # Events in time order: an end before a start at the same instant, an inner range's end before its parent's.
    t_ = np.concatenate((s, e))
    is_start = np.concatenate((np.ones(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)))
    who = np.concatenate((np.arange(n), np.arange(n)))
    order = np.lexsort((np.where(is_start, who, -who), is_start, t_))
    t_, is_start, who = t_[order], is_start[order], who[order]
    depth_after = np.cumsum(np.where(is_start, 1, -1))
    depth = np.empty(n, dtype=np.int64)
    depth[who[is_start]] = depth_after[is_start]
    parent = np.full(n, -1, dtype=np.int64)
    for d in range(2, int(depth.max()) + 1 if n else 0):
        kids, up = np.flatnonzero(depth == d), np.flatnonzero(depth == d - 1)
        at = np.searchsorted(up, kids) - 1
        if len(kids) and (at < 0).any():
            return None
        parent[kids] = up[at]
    has = parent >= 0
    if bool((e[has] > e[parent[has]]).any()) or bool((depth < 1).any()):
        return None
    top = np.where(is_start, who, parent[who])  # the innermost range open after each event
    keep = (top[:-1] >= 0) & (t_[1:] > t_[:-1])
    return t_[:-1][keep], t_[1:][keep], top[:-1][keep]


def _stacked_pieces(ss: np.ndarray, ee: np.ndarray, cc: np.ndarray, hh: np.ndarray, same: np.ndarray,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``innermost`` for ranges that cross (sorted by key and start): a walk with a stack, the latest started range
    still open naming each instant."""
    out_s: list[int] = []
    out_e: list[int] = []
    out_i: list[int] = []
    sl, el = ss.tolist(), ee.tolist()
    stack: list[int] = []
    cur = 0

    def close_until(t_: int) -> None:  # emit the innermost open range's pieces up to ``t_``, closing ranges on the way
        nonlocal cur
        while stack:
            top = stack[-1]
            if el[top] <= cur:  # ended while a later range was innermost
                stack.pop()
                continue
            end = min(el[top], t_)
            if end > cur:
                out_s.append(cur)
                out_e.append(end)
                out_i.append(top)
                cur = end
            if el[top] <= t_:
                stack.pop()
                continue
            break
        cur = max(cur, t_)

    for i in range(len(sl)):
        if i and not same[i - 1]:  # a new thread or category: close everything open
            close_until(max(el[j] for j in stack) if stack else cur)
            stack.clear()
        if not stack:
            cur = sl[i]
        close_until(sl[i])
        stack.append(i)
    close_until(max(el[j] for j in stack) if stack else cur)
    idx = np.array(out_i, dtype=np.int64)
    return (np.array(out_s, dtype=np.int64), np.array(out_e, dtype=np.int64), cc[idx], hh[idx], ss[idx])


class _Host:
    """Fetches the covering intervals of one process's speaking threads, slice by slice of time (and the
    device's migration bursts, ``uvm_gaps``, when the device is given)."""

    def __init__(self, trace: Trace, pid: int, tids: list[int] | None, device: int | None = None,
                 uvm: bool = False):
        self.trace, self.pid, self.tids = trace, pid, tids
        self.uvm = uvm_gaps(trace, pid, device) if uvm else None
        # Per migration burst piece: the end of the gap it is part of (its migration's start): what counts it.
        self.uvm_group = None if self.uvm is None else self.uvm[1]
        self.where = _threads(pid, tids)
        self.api = _name_codes(trace, "cuda_api", cuda_class) if trace.has_rows("cuda_api") else None
        self.osrt = _name_codes(trace, "osrt", os_class) if trace.has_rows("osrt") else None
        self.nvtx = trace.has_rows("nvtx")
        self.half = _half_periods(trace, pid, tids) if trace.has_rows("cpu_samples") else {}
        self.max_half = max(self.half.values(), default=0)
        # Only named speaking threads: with any thread of the process (launching thread unknown), a helper thread
        # asleep would paint nearly every instant.
        self.off_cpu = _off_cpu_names(trace) if tids and trace.has_rows("off_cpu") else None
        if self.uvm is not None and len(self.uvm[0]) and self.off_cpu is not None and tids:
            self.uvm, self.uvm_group = _host_side(trace, self.uvm, pid, tids)

    def count(self, lo: int, hi: int) -> int:
        """How many host rows ``intervals`` would fetch for ``[lo, hi)``: what the slices of time are sized by
        (CPU samples included: tens of millions of them must not come in one slice)."""
        n = 0
        for table, ok in (("cuda_api", self.api), ("osrt", self.osrt), ("nvtx", self.nvtx), ("off_cpu", self.off_cpu)):
            if ok is not None and ok is not False:
                n += int(self.trace.scalar(f"SELECT count(*) FROM {self.trace.stored(table, lo, hi)} "  # noqa: S608
                                           f"WHERE {self.where} AND start_ns < {hi} AND end_ns > {lo}"))
        if self.half:
            n += int(self.trace.scalar(f"SELECT count(*) FROM cpu_samples WHERE {self.where} "  # noqa: S608 - integers
                                       f"AND start_ns >= {lo - self.max_half} AND start_ns < {hi + self.max_half}"))
        return n

    def intervals(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, Slots, np.ndarray, np.ndarray,
                                                  np.ndarray, np.ndarray]:
        """(start, end, category code, slots, before, before_start, source, group) of every covering interval
        overlapping ``[a, b)``, clipped to it (none empty); ``before``: the positions of those that started
        before ``a``, and their unclipped starts; ``source``: 1 for a CUDA API call, 2 for an OS runtime call,
        else 0; ``group``: for a migration burst piece the gap it belongs to (its end), else -1. Each source appends its (start, end, code, slots, source) to ``parts``, only intervals that
        overlap ``[a, b)`` (the SQL sources by their filter)."""
        parts = []
        # Per part with pieces of one thing (a range, a gap between migrations): the thing each piece belongs to.
        groups: dict[int, np.ndarray] = {}
        span = f"AND start_ns < {b} AND end_ns > {a} AND end_ns > start_ns"
        for table, names, default, source in (("cuda_api", self.api, CODE["cuda_other"], 1),
                                              ("osrt", self.osrt, CODE["os_other"], 2)):
            if names is None:
                continue
            d = self.trace.arrays(f"SELECT start_ns, end_ns, COALESCE(hash(name), 0)::UBIGINT AS h "  # noqa: S608
                                  f"FROM {self.trace.stored(table, a, b)} WHERE {self.where} {span}")
            codes, sl = _table_slots(d["h"], names[0], names[1], default)
            parts.append((d["start_ns"], d["end_ns"], codes, sl, source))
        if self.nvtx:
            d = self.trace.arrays(f"""
                SELECT start_ns, end_ns, COALESCE(hash(text), 0)::UBIGINT AS h, (CASE
                    WHEN regexp_matches(COALESCE(text, ''), '{NVTX_NCCL_SETUP_RE}') THEN {CODE['nccl_setup']}
                    WHEN regexp_matches(COALESCE(domain, ''), '{NVTX_COMM_DOMAIN_RE}')
                      OR regexp_matches(COALESCE(text, ''), '{NVTX_COMM_TEXT_RE}') THEN {CODE['mpi']}
                    WHEN regexp_matches(COALESCE(text, ''), '{NVTX_JIT_RE}') THEN {CODE['jit_module']}
                    ELSE {CODE['user_range']} END)::UTINYINT AS c
                , tid FROM {self.trace.stored("nvtx", a, b)} WHERE {self.where} AND kind <> 'mark' {span}""")  # noqa: S608
            ns_, ne_, nc_, nh_, ng_ = innermost(d["start_ns"], d["end_ns"], d["c"], d["h"], d["tid"])
            if ng_ is not None:
                groups[len(parts)] = ng_
            parts.append((ns_, ne_, nc_, slots(nc_, nh_), 0))
        if self.uvm is not None and len(self.uvm[0]):
            us, ue, uh = self.uvm
            inside = (us < b) & (ue > a) & (ue > us)
            uc = np.full(int(inside.sum()), CODE["uvm_migration"], dtype=np.uint8)
            parts.append((us[inside], ue[inside], uc, slots(uc, uh[inside]), 0))
            assert self.uvm_group is not None  # set with self.uvm
            groups[len(parts) - 1] = self.uvm_group[inside]
        if self.half:
            m = self.max_half
            d = self.trace.arrays(f"""
                SELECT tid, start_ns, hash(COALESCE(function, module, '?'))::UBIGINT AS h FROM cpu_samples
                WHERE {self.where} AND start_ns >= {a - m} AND start_ns < {b + m}""")  # noqa: S608 - integers
            known = np.array(sorted(self.half), dtype=np.int64)
            halves = np.array([self.half[t] for t in sorted(self.half)], dtype=np.int64)
            at = np.minimum(np.searchsorted(known, d["tid"]), len(known) - 1)
            hp = np.where(known[at] == d["tid"], halves[at], 0)
            keep = (hp > 0) & (d["start_ns"] + hp > a) & (d["start_ns"] - hp < b)
            sc = np.full(int(keep.sum()), CODE["host_cpu"], dtype=np.uint8)
            parts.append((d["start_ns"][keep] - hp[keep], d["start_ns"][keep] + hp[keep], sc, slots(sc, d["h"][keep]),
                          0))
        if self.off_cpu is not None:  # the thread switched out by the scheduler
            d = self.trace.arrays(f"SELECT start_ns, end_ns, hash({OFF_CPU_NAME_SQL})::UBIGINT AS h "  # noqa: S608
                                  f"FROM {self.trace.stored('off_cpu', a, b)} WHERE {self.where} {span}")
            oc = np.full(len(d["h"]), CODE["off_cpu"], dtype=np.uint8)
            parts.append((d["start_ns"], d["end_ns"], oc, slots(oc, d["h"]), 0))
        # Per interval: the gap a migration burst piece belongs to (pieces of one gap count as one), else -1.
        group = np.concatenate([groups[k] if k in groups else np.full(len(p[0]), -1, dtype=np.int64)
                                for k, p in enumerate(parts)]
                               + [_EMPTY]).astype(np.int64)
        parts = [p for p in parts if len(p[0])]
        if not parts:
            u8 = np.empty(0, dtype=np.uint8)
            return _EMPTY, _EMPTY, u8, slots(_EMPTY, _EMPTY), _EMPTY, _EMPTY, u8, _EMPTY
        if len(parts) == 1:  # the usual big case: one source (CUDA calls), its arrays used as they are
            s, e, c, sl, _ = parts[0]
            # Every source's arrays are made here (fetched, or selected with a mask): they are clipped in place.
            s, e = (x if x.dtype == np.int64 and x.flags.writeable else x.astype(np.int64) for x in (s, e))
        else:
            s, e = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            c, sl = np.concatenate([p[2] for p in parts]), _join_slots([p[3] for p in parts])
        src = np.repeat(np.array([p[4] for p in parts], dtype=np.uint8), [len(p[0]) for p in parts])
        before = np.flatnonzero(s < a)  # few: at most one per thread and source
        s0 = s[before]
        np.maximum(s, a, out=s)
        np.minimum(e, b, out=e)
        return s, e, c, sl, before, s0, src, group


def _split_at(gs: np.ndarray, ge: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The idle pieces ``[gs, ge)`` (sorted, disjoint, may touch) cut at the points of ``cuts`` strictly inside
    one: (starts, ends, index of the piece each part comes from), in time order."""
    if len(cuts):
        j = np.searchsorted(gs, cuts, side="right") - 1
        inside = cuts[(j >= 0) & (cuts > gs[np.maximum(j, 0)]) & (cuts < ge[np.maximum(j, 0)])]
        if len(inside):
            # Cuts lie strictly inside pieces, so the sorted starts and the sorted ends pair up in order.
            fs = np.concatenate((gs, inside))
            fe = np.concatenate((inside, ge))
            fs.sort(kind="stable")
            fe.sort(kind="stable")
            return fs, fe, np.searchsorted(gs, fs, side="right") - 1
    return gs, ge, np.arange(len(gs))


def paint_intervals(gs: np.ndarray, ge: np.ndarray, s: np.ndarray, e: np.ndarray, cat: np.ndarray,
                    name: np.ndarray | None, cuts: np.ndarray, out: Painted, piece: np.ndarray | None = None,
                    counted: np.ndarray | None = None, slot: Slots | None = None,
                    src: np.ndarray | None = None, group: np.ndarray | None = None,
                    seen: set[tuple[int, int, int]] | None = None) -> None:
    """Paint the idle pieces ``[gs, ge)`` (sorted, disjoint) with the covering intervals ``(s, e, cat, name)``
    (any order, may overlap), adding into ``out`` per bin of ``cuts`` (bin i starts at ``cuts[i]``; time
    before ``cuts[0]`` goes to bin 0). ``piece``: the index of each idle piece in ``out.taken``. ``counted``
    (bool per interval, updated): set, the interval was already counted as a call (an earlier slice of time
    painted idle with it) and paints without counting again; on return, set for every interval that painted.
    ``slot``: the intervals' (category, name) pairs when the caller has them (``name`` is then not read;
    ``slots(cat, name)`` otherwise). ``src``: the intervals' sources (1 CUDA API, 2 OS runtime, else 0), for
    ``out.cover`` (none: nothing covers). ``group`` (per interval, -1 for none) with ``seen`` (updated): the
    intervals of one group count as one call of their (category, name), however many paint (the pieces of one
    gap between migrations, split by what the host did, are one migration: issue #39, class 7).

    An instant goes to the lowest category code covering it (``none`` if none does), named after the interval
    of that category reaching furthest of those started by then: one compiled walk over the idle parts (the
    pieces cut at the bins' starts) and the intervals in start order (``analysis.diagnosis.sweep``)."""
    if not len(gs):
        return
    fs, fe, of = _split_at(gs, ge, cuts)
    part_piece = of if piece is None else piece[of]
    if slot is None:
        if name is None:
            raise ValueError("paint_intervals: names or slots needed")
        slot = slots(cat, name)
    sl = slot
    # The walk takes the intervals in start order (ties in the given order).
    if counted is None:
        counted = np.zeros(len(s), dtype=np.bool_)
    order = None if bool(np.all(s[1:] >= s[:-1])) else np.argsort(s, kind="stable")  # they mostly come sorted
    cover = {}
    if out.cover is not None and out.cover_pieces is not None:
        cover = {"src": np.zeros(len(s), dtype=np.uint8) if src is None else src,
                 "cover_pieces": out.cover_pieces, "cover": out.cover}
    was = counted.copy() if group is not None else None
    rec = sweep(fs, fe, cuts, part_piece, s, e, cat, sl.slot, len(sl.cat), NONE, out.take, out.long, counted,
                out.ns, out.taken, out.long_ns, order=order, **cover)
    k = rec[:, 1]
    for b, c, h, ns, calls in zip(rec[:, 0].tolist(), sl.cat[k].tolist(), sl.name[k].tolist(), rec[:, 2].tolist(),
                                  rec[:, 3].tolist(), strict=True):
        acc = out.names.setdefault((b, c, h), [0, 0])
        acc[0] += ns
        acc[1] += calls
    if group is not None and was is not None and seen is not None:
        _count_groups_once(out, group, counted & ~was, s, cuts, sl, seen)


def _count_groups_once(out: Painted, group: np.ndarray, painted: np.ndarray, s: np.ndarray, cuts: np.ndarray,
                       sl: Slots, seen: set[tuple[int, int, int]]) -> None:
    """Take back the calls the sweep counted for intervals (``painted`` now) of a group already counted with
    the same (category, name): from the bin the interval starts in (a piece of a gap starts in idle)."""
    for i in np.flatnonzero(painted & (group >= 0)).tolist():
        c, h = int(sl.cat[sl.slot[i]]), int(sl.name[sl.slot[i]])
        key = (int(group[i]), c, h)
        if key not in seen:
            seen.add(key)
            continue
        b = min(out.bins - 1, max(0, int(np.searchsorted(cuts, s[i], side="right")) - 1)) if len(cuts) else 0
        acc = out.names.get((b, c, h))
        if acc is None or acc[1] <= 0:  # started before its bin's idle: the bin it painted first in
            acc = next((v for (bb, cc, hh), v in sorted(out.names.items()) if cc == c and hh == h and v[1] > 0), None)
        if acc is not None:
            acc[1] -= 1


def paint(trace: Trace, pid: int | None, tids: list[int] | None, gs: np.ndarray, ge: np.ndarray,
          cuts: np.ndarray | Sequence[int] = (), take: np.ndarray | None = None,
          extra: tuple[np.ndarray, np.ndarray] | None = None, *, device: int | None = None,
          uvm: bool = False, long: np.ndarray | None = None) -> Painted:
    """The anatomy of the idle pieces ``[gs, ge)`` (sorted, disjoint) of one device of process ``pid``,
    spoken for by threads ``tids`` (None: any thread of the process), split at ``cuts``; with ``take``
    (bool per bin and category), ``taken`` per piece (see ``Painted``). ``extra``: more idle pieces (sorted,
    disjoint, none inside ``[gs, ge)``) painted in the same pass into ``extra`` of the result. ``uvm``: paint
    ``device``'s migration bursts too (``uvm_gaps``). ``long``: bool per piece of ``[gs, ge)``, see ``Painted``."""
    cuts = np.asarray(cuts, dtype=np.int64)
    out = Painted(max(1, len(cuts)))
    if take is not None:
        out.take, out.taken = take, np.zeros(len(gs), dtype=np.int64)
    out.long = long
    if long is not None:
        out.cover_pieces = np.flatnonzero(long)  # few: the long gaps
        out.cover = np.zeros((len(out.cover_pieces), 2), dtype=np.int64)
    parts = [(gs, ge, out)]
    if extra is not None:
        out.extra = Painted(out.bins)
        parts.append((extra[0], extra[1], out.extra))
    parts = [(a, z, o) for a, z, o in parts if len(a)]
    if not parts:
        return out
    if pid is None:  # no process to ask: all of it is unexplained
        for a, z, o in parts:
            paint_intervals(a, z, _EMPTY, _EMPTY, np.empty(0, np.uint8), np.empty(0, np.uint64), cuts, o,
                            np.arange(len(a)))
        return out
    host = _Host(trace, pid, tids, device, uvm)
    lo, hi = min(int(p[0][0]) for p in parts), max(int(p[1][-1]) for p in parts)
    k = max(1, math.ceil(host.count(lo, hi) / SLICE_ROWS))
    edges = [lo + (hi - lo) * i // k for i in range(k + 1)]  # integer arithmetic: absolute clocks are ~2^62
    # A call running across a slice's end is fetched again (clipped) by the next slice: it counts once, in the
    # slice where it first painted idle. Per part, the calls that painted and ran on past the slice, as
    # (unclipped start, category, name), are looked up among the next slice's calls that started before it.
    # Shared by the parts (a call painting both the gaps and ``extra`` is one call, as their sum ``plus`` says).
    carried: set[tuple[int, int, int]] = set()
    seen: set[tuple[int, int, int]] = set()  # the (group, category, name) counted: ranges and migration gaps
    for t0, t1 in zip(edges[:-1], edges[1:], strict=True):
        here = [(int(np.searchsorted(pz, t0, side="right")), int(np.searchsorted(pa, t1, side="left")), pa, pz, o, k)
                for k, (pa, pz, o) in enumerate(parts)]
        here = [x for x in here if x[1] > x[0]]
        if not here or t1 <= t0:
            continue
        # ``before``: running when the slice starts (few), with their unclipped starts.
        s, e, c, sl, before, s0, src, group = host.intervals(t0, t1)
        started = dict(zip(before.tolist(), s0.tolist(), strict=True))

        def ident(i: int) -> tuple[int, int, int]:
            return started.get(i, int(s[i])), int(c[i]), int(sl.name[sl.slot[i]])  # noqa: B023 - used at once
        after = e >= t1
        counted = np.zeros(len(s), dtype=np.bool_)
        counted[before] = [ident(i) in carried for i in before.tolist()]
        for i0, i1, pa, pz, o, _k in here:
            ps, pe = np.maximum(pa[i0:i1], t0), np.minimum(pz[i0:i1], t1)
            keep = pe > ps
            paint_intervals(ps[keep], pe[keep], s, e, c, None, cuts, o, np.arange(i0, i1)[keep], counted, sl, src,
                            group if bool((group >= 0).any()) else None, seen)
        carried = {ident(i) for i in np.flatnonzero(counted & after).tolist()}
    return out


def window_idle(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The idle pieces of ``[lo, hi)`` around operations sorted by start: the complement of their union."""
    m = (start < hi) & (end > lo)
    s, e = np.maximum(start[m], lo), np.minimum(end[m], hi)
    if not len(s):
        return np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64)
    gs, ge = pairing(s, e)
    reach = int(e.max())
    head_s, head_e = ([lo], [int(s[0])]) if s[0] > lo else ([], [])
    tail_s, tail_e = ([reach], [hi]) if reach < hi else ([], [])
    return (np.array([*head_s, *gs.tolist(), *tail_s], dtype=np.int64),
            np.array([*head_e, *ge.tolist(), *tail_e], dtype=np.int64))


def resolve_names(trace: Trace, hashes: set[int]) -> dict[int, str]:
    """Names for name hashes: CUDA API and OS runtime names from their dictionaries, NVTX texts and sampled
    functions by a query for just those hashes."""
    found: dict[int, str] = {}
    for table in ("cuda_api", "osrt", "uvm", "off_cpu"):
        if ("anatomy_names", table) in trace.memo:
            found.update({h: n for h, n in trace.memo[("anatomy_names", table)][2].items() if h in hashes})
    rest = [h for h in hashes if h not in found]
    if rest:
        lst = ", ".join(f"{int(h)}::UBIGINT" for h in rest)
        queries = []
        if trace.has_rows("nvtx"):
            queries.append(f"SELECT DISTINCT hash(text) h, text n FROM nvtx WHERE hash(text) IN ({lst})")  # noqa: S608
        if trace.has_rows("cpu_samples"):
            queries.append("SELECT DISTINCT hash(COALESCE(function, module, '?')) h, COALESCE(function, module, '?') n "  # noqa: S608
                           f"FROM cpu_samples WHERE hash(COALESCE(function, module, '?')) IN ({lst})")
        for q in queries:
            found.update({int(h): str(n) for h, n in trace.sql(q)})
    return found


class IdleTop(TypedDict):
    name: int  # the name's hash, resolved once for the whole report (``resolve_names``)
    ns: int
    calls: int


class IdleEntryCategory(TypedDict):
    category: str
    ns: int
    top: list[IdleTop]


class IdleEntry(TypedDict):
    """One device's painted idle in one bin, before its names are resolved (``IdleAnatomy``'s fields)."""

    pid: int | None
    device: int | None
    phase: str
    idle_ns: int
    threads: list[int] | None
    categories: list[IdleEntryCategory]


def entries(trace: Trace, painted: Painted, pid: int | None, device: int | None, tids: list[int] | None,
            bin_names: Sequence[str]) -> list[IdleEntry]:
    """The JSON entries of one device's painted idle, one per bin with idle: categories by time, top names."""
    out: list[IdleEntry] = []
    # The names of each (bin, category), gathered in one pass (not one pass over every name per category).
    named: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for (bb, cc, h), v in painted.names.items():
        named.setdefault((int(bb), int(cc)), []).append((v[0], v[1], h))
    for b in range(painted.bins):
        idle = int(painted.ns[b].sum())
        if not idle:
            continue
        cats: list[IdleEntryCategory] = []
        for c in np.argsort(-painted.ns[b], kind="stable"):
            ns = int(painted.ns[b, c])
            if not ns:
                break
            names = sorted(named.get((b, int(c)), ()), key=lambda r: (-r[0], r[2]))[:TOP]
            cats.append({"category": CATEGORIES[c], "ns": ns,
                         "top": [{"name": h, "ns": n, "calls": k} for n, k, h in names]})
        out.append({"pid": pid, "device": device, "phase": bin_names[b], "idle_ns": idle, "threads": tids,
                    "categories": cats})
    return out


def _by_phase(p: Painted, bin_phase: Sequence[str], names: Sequence[str]) -> Painted | None:
    """A painting cut at phase and iteration starts, summed per phase (None when a bin's phase is unknown)."""
    index = {n: i for i, n in enumerate(names)}
    if any(b not in index for b in bin_phase[:p.bins]):
        return None
    out = Painted(len(names))
    to = np.array([index[b] for b in bin_phase[:p.bins]], dtype=np.int64)
    np.add.at(out.ns, to, p.ns)
    for (b, c, h), (ns, calls) in p.names.items():
        acc = out.names.setdefault((int(to[b]), c, h), [0, 0])
        acc[0] += ns
        acc[1] += calls
    return out


def idle_anatomy(trace: Trace, phases: Sequence[tuple[str, int]] = ()) -> list[IdleAnatomy]:
    """``reports[].idle_anatomy``: per device and phase (``phases``: (name, start_ns) in time order; none:
    one ``whole`` phase), the idle, its categories by time and each category's top names with their time
    and number of calls. Sums exactly to the breakdown's ``idle_ns`` per device."""
    cuts = np.array([s for _, s in phases], dtype=np.int64)
    bin_names = [n for n, _ in phases] or ["whole"]
    sp = speakers(trace)
    shared = trace.memo.get("idle_painted")  # the gap rules' painting of these same gaps, when made
    out: list[IdleEntry] = []
    for u in unit_ops(trace):
        if not len(u):
            continue
        pid, device = u.pid, u.device
        tids = sp.get((pid, device)) if pid is not None else None
        done = shared["units"].get((pid, device)) if shared is not None else None
        p = _by_phase(done, shared["bin_phase"], bin_names) if done is not None and shared is not None else None
        if p is None:  # not painted by the gap rules (or cut otherwise): the device's idle, painted here
            gs, ge = pairing(u.start, u.end)
            p = paint(trace, pid, tids, gs, ge, cuts, device=device, uvm=True)
        out += entries(trace, p, pid, device, tids, bin_names)
    hashes = {t["name"] for e in out for c in e["categories"] for t in c["top"]}
    names = resolve_names(trace, hashes) if hashes else {}
    return [IdleAnatomy(e["pid"], e["device"], e["phase"], e["idle_ns"],
                        None if e["threads"] is None else tuple(e["threads"]),
                        tuple(IdleCategory(c["category"], c["ns"],
                                           tuple(IdleName(names.get(t["name"], "?"), t["ns"], t["calls"]) for t in c["top"]))
                              for c in e["categories"]))
            for e in out]
