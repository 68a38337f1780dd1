"""Idle gaps of every GPU, each owned by at most one rule, so that rule impacts add up.

A gap is found with NVIDIA's ``gpu_gaps`` semantics (``analysis.model.activity.unit_gaps``): per process and
device, profiler overhead counted as busy, leading and trailing idle excluded, every gap of any length.

Idle is owned by what the host was doing at each instant, not by the gap around it. The idle anatomy
(``analysis.diagnosis.idle_anatomy``) paints every idle instant with one category of ``analysis.diagnosis.idle_classes`` (the
most specific host activity then); a rule that declares the category in ``owns_idle`` owns that instant
(``analysis.diagnosis.rules.nsys.idle_claims``, one engine for every such rule): SYNC001 the idle inside blocking
synchronize calls (``sync``), MEM002 inside synchronous copies and memsets (``sync_copy``, ``memset``),
MEM006 inside allocation calls (``allocation``, loop phases), HOST004 inside compilation and module loading
(``jit_module``), HOST003 inside host communication ranges (``mpi``), HOST001 inside OS runtime calls
(``os_io``, ``os_wait``, ``os_other``). A sync that returned as the device
drained owns only those instants: the idle after it, while the host computed or communicated, is not the
sync's.

What no such rule claims (the host in other CUDA calls, launches, user ranges, sampled CPU work, off CPU,
or nothing recorded) stays with the gap's structural owner, first that applies:

1. ``GPU001`` - the gap is at least ``GPU001.min_gap_us`` long.
2. ``KRN001`` - the gap lies inside a run of short kernels (launch-bound work).
3. ``GPU002`` - the gap starts inside a low-utilization window (GPU002 decides this last, from the
   gaps left unowned, so ownership does not depend on its thresholds).

Each is the rule's own trait (``Rule.gap_role``: ``long_gap``, ``short_runs``, ``low_utilization``), with the
thresholds that decide ownership and their defaults; this module finds the rule that plays a part among the
rules it is given (``RuleContext.claimers``), and names none.

Gaps matching none stay unowned (small idle nobody can attribute): the gap's owner keeps the gap less what
the claims took (``OwnedUnit.kept``), so every idle nanosecond has at most one owner and the owners' sum
never exceeds the idle. Which gaps opened while a sync or a blocking copy was in progress is still recorded
(``OwnedUnit.opened_in``, ``Rule.opened_in``), as SYNC001's and MEM002's description of the pattern, not as
ownership.
Ownership is computed once per open trace and set of ownership thresholds, on NumPy arrays (``owned``: the
structural owners and the calls in progress in compiled passes, ``analysis.diagnosis.sweep``);
GPU001's gaps get their causes from ``analysis.diagnosis.rules.nsys.causes``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from analysis.diagnosis.rules.base import Rule
from analysis.diagnosis.rules.nsys.common import SYNC_API_RE, api_name_in
from analysis.diagnosis.rules.nsys.copies import copy_calls
from analysis.diagnosis.rules.nsys.idle_claims import claims
from analysis.diagnosis.sweep import call_at, classify, distinct_sorted, reach, region_sum, short_runs
from analysis.model.activity import CHUNK, Runs, UnitOps, top_order, unit_gaps, unit_ops
from analysis.model.intervals import NCCL
from analysis.model.trace import Trace

_EMPTY = np.empty(0, dtype=np.int64)

# Owner codes of ``OwnedUnit.owner`` by the owner's part in the gap table (``Rule.gap_role``; 0: unowned; the
# ``low_utilization`` rule decides last, from the unowned gaps).
OWNER_CODES = {"long_gap": 3, "short_runs": 4}
# Codes of ``OwnedUnit.opened_in`` by ``Rule.opened_in``: what the host was inside as the device went idle (0: neither).
OPENED_CODES = {"sync": 1, "blocking_copy": 2}


def gap_rule(rules: Sequence[type[Rule]], role: str) -> type[Rule]:
    """The rule of ``rules`` (``RuleContext.claimers``: the registry's rules that own idle) that plays ``role`` in the
    gap table (``Rule.gap_role``)."""
    for r in rules:
        if r.gap_role == role:
            return r
    raise LookupError(f"no rule plays {role!r} in the gap table among {', '.join(r.id for r in rules) or 'none'}")


def owner_code(rule: type[Rule]) -> int:
    """The code of ``OwnedUnit.owner`` for the gaps ``rule`` owns structurally (a ``long_gap`` or ``short_runs`` rule)."""
    return OWNER_CODES[str(rule.gap_role)]


def owner_rules(rules: Sequence[type[Rule]]) -> list[type[Rule]]:
    """The structural owners among ``rules``, in owner-code order."""
    return sorted((r for r in rules if r.gap_role in OWNER_CODES), key=owner_code)


# Records of the few rows a rule reports (the longest gaps, the runs and regions with the most idle). The
# gaps themselves stay NumPy arrays, named in ``OwnedUnit``, however many millions there are.
class Gap(NamedTuple):
    """One idle gap of a process's device: ``[start_ns, end_ns)``, ``ns`` long."""

    pid: int | None
    device: int | None
    start_ns: int
    end_ns: int
    ns: int


class KernelRun(NamedTuple):
    """A run of short kernels (KRN001's) that owns idle: ``kernels`` kernels busy ``kernel_ns``, idle ``idle_ns``
    in the gaps between them."""

    pid: int | None
    device: int | None
    start_ns: int
    end_ns: int
    kernels: int
    kernel_ns: int
    idle_ns: int


class LowRegion(NamedTuple):
    """GPU002's region: ``windows`` adjacent low-utilization windows merged; ``idle_ns`` all its idle,
    ``owned_ns`` the idle of the gaps no other rule owns that start in it."""

    pid: int | None
    device: int | None
    start_ns: int
    end_ns: int
    windows: int
    idle_ns: int
    owned_ns: int


class OwnedTotal(NamedTuple):
    """The gaps of one owner: their summed length and their number."""

    ns: int
    gaps: int


def ownership_params(all_params: Mapping[str, Mapping[str, float]] | None,
                     rules: Sequence[type[Rule]]) -> dict[str, float]:
    """The ownership thresholds in ns/counts, from every rule's resolved thresholds: those of the rules of ``rules``
    that play a part in the gap table (``Rule.gap_role``), their defaults where ``all_params`` lacks them."""
    def get(role: str, name: str) -> float:
        rule = gap_rule(rules, role)
        return float((all_params or {}).get(rule.id, {}).get(name, rule.thresholds[name].default))

    return {
        "min_gap_ns": int(get("long_gap", "min_gap_us") * 1000),
        "short_ns": int(get("short_runs", "short_kernel_us") * 1000),
        "min_run": int(get("short_runs", "min_run_kernels")),
        "win_min_ns": max(1, int(get("low_utilization", "window_min_us") * 1000)),
        "max_windows": max(1, int(get("low_utilization", "max_windows"))),
        "max_busy_pct": get("low_utilization", "max_busy_pct"),
    }


def sync_names(trace: Trace, gaps: Sequence[tuple[int | None, int]]) -> list[str | None]:
    """For a bounded sample of (pid, gap_start), the sync call in progress when the gap opened (None
    where the process is unknown)."""
    if not gaps:
        return []
    values = ", ".join(f"({i}, {'NULL' if p is None else int(p)}, {int(g)})" for i, (p, g) in enumerate(gaps))
    rows = dict(trace.sql(f"""
        WITH pts(i, pid, g) AS (VALUES {values})
        SELECT i, arg_max(a.name, a.start_ns) FROM pts JOIN cuda_api a
          ON a.pid = pts.pid AND a.start_ns <= pts.g AND a.end_ns >= pts.g
        WHERE {api_name_in(trace, SYNC_API_RE, "a.name")}
        GROUP BY i"""))  # noqa: S608 - integers and escaped names
    return [rows.get(i) for i in range(len(gaps))]


def _runs(trace: Trace, short_ns: int, min_run: int) -> list[Runs]:
    """Each unit's runs of at least ``min_run`` consecutive kernels (compute or NCCL) each shorter than
    ``short_ns`` (copies and memsets in between do not break a run), cached on the trace. A run's id is the
    position of its first kernel among the unit's kernels plus the unit's position << 40 (unique per report,
    growing in time order within a unit)."""
    key = ("krn_runs", short_ns, min_run)
    if key not in trace.memo:
        out = []
        for i, u in enumerate(unit_ops(trace)):
            first, start, end, kernels, kernel_ns = short_runs(u.start, u.end, u.cat, NCCL, short_ns, min_run)
            out.append(Runs(first + (i << 40), start, end, kernels, kernel_ns))
        trace.memo[key] = out
    return trace.memo[key]


class _Calls:
    """Host calls of one kind per process, sorted by start, with the running maximum of their ends: one
    binary search then answers "was any call that started at or before t still running at t?"."""

    def __init__(self) -> None:
        self.by_pid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.owner_by_pid: dict[int, np.ndarray] = {}

    def add(self, pid: int, start: np.ndarray, end: np.ndarray, own: bool = False) -> None:
        """Add one process's calls; ``own``: the arrays are this object's to overwrite."""
        if not len(start):
            return
        if not (own and end.flags.writeable):
            end = end.copy()  # the running maximum is written in place
        got = reach(start, end)  # API rows are often in order already
        if got is None:
            order = np.argsort(start, kind="stable")
            start, end = start[order], end[order]
            got = reach(start, end)
            assert got is not None  # sorted just above
        # ``reach``: the furthest end so far, and the call reaching it (still running when any later moment is
        # covered).
        self.by_pid[int(pid)] = (start, got[0])
        self.owner_by_pid[int(pid)] = got[1]

    @classmethod
    def grouped(cls, pid: np.ndarray, start: np.ndarray, end: np.ndarray) -> _Calls:
        calls = cls()
        pids = np.unique(pid)
        for p in pids:
            m = slice(None) if len(pids) == 1 else pid == p
            calls.add(int(p), start[m], end[m])
        return calls

    def running_at(self, pid: int | None, t: np.ndarray) -> np.ndarray:
        return self.call_at(pid, t) >= 0

    def call_at(self, pid: int | None, t: np.ndarray) -> np.ndarray:
        """Per moment, the position (in start order) of a call of ``pid`` running then, else -1."""
        calls = self.by_pid.get(pid) if pid is not None else None
        if calls is None or pid is None or not len(t):
            return np.full(len(t), -1, dtype=np.int64)
        return call_at(*calls, self.owner_by_pid[pid], t)


def _sync_calls(trace: Trace, pids: set[int]) -> _Calls:
    """The blocking synchronization calls of the processes ``pids``."""
    where = api_name_in(trace, SYNC_API_RE)
    if where == "FALSE" or not pids:
        return _Calls()
    cond = f"{where} AND start_ns IS NOT NULL AND end_ns IS NOT NULL"
    if len(pids) == 1:  # the common case: two columns to fetch instead of three
        pid = next(iter(pids))
        d = trace.arrays(f"SELECT start_ns, end_ns FROM cuda_api WHERE pid = {int(pid)} AND {cond}")  # noqa: S608
        calls = _Calls()
        calls.add(pid, d["start_ns"], d["end_ns"], own=True)
        return calls
    d = trace.arrays(f"SELECT pid, start_ns, end_ns FROM cuda_api WHERE pid IS NOT NULL AND {cond}")  # noqa: S608
    return _Calls.grouped(d["pid"], d["start_ns"], d["end_ns"])


@dataclass(frozen=True)
class OwnedUnit:
    """One unit's gaps in time order with their owner code (0: unowned, maybe GPU002's); ``krn_idx`` are
    the positions of KRN001's gaps and ``krn_run`` the id of the run that owns each."""

    unit: UnitOps
    gap_start: np.ndarray
    gap_end: np.ndarray
    owner: np.ndarray
    krn_idx: np.ndarray
    krn_run: np.ndarray
    runs: Runs
    totals: dict[int, OwnedTotal]  # owner code -> its gaps' total and count
    sync_calls: np.ndarray  # the sync calls (positions among the process's) in progress as a gap opened
    opened_in: np.ndarray  # per gap, ``OPENED_CODES``: a sync (first) or a blocking copy in progress as it opened
    # Per gap, the time rules that own idle by what the host did (``idle_claims``) take out of it: the gap's
    # owner keeps ``gap_end - gap_start - taken``.
    taken: np.ndarray = field(default_factory=lambda: _EMPTY)
    # Per gap: unowned (code 0) with idle left after the claims: the gaps GPU002 may own (None: every gap of
    # code 0).
    unowned_left: np.ndarray | None = None

    def kept(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The time each gap's owner keeps (the gap less what claims took)."""
        ns = self.gap_end[idx] - self.gap_start[idx]
        return ns - self.taken[idx] if len(self.taken) else ns


def _opened_in(gs: np.ndarray, pid: int | None, syncs: _Calls, copies: _Calls) -> tuple[np.ndarray, np.ndarray]:
    """Per gap, ``OPENED_CODES``: a sync call in progress as the device went idle, else a blocking copy, else 0;
    and the sync calls (positions among the process's) the gaps opened in, one per such gap."""
    out = np.zeros(len(gs), dtype=np.uint8)
    sync_at = syncs.call_at(pid, gs)
    by_sync = sync_at >= 0
    out[by_sync] = OPENED_CODES["sync"]
    left = np.flatnonzero(~by_sync)
    out[left[copies.running_at(pid, gs[left])]] = OPENED_CODES["blocking_copy"]
    return out, sync_at[by_sync]


def _distinct(x: np.ndarray) -> np.ndarray:
    """``np.unique`` of call positions that come (almost always) in time order: one linear pass when they are
    sorted already (numpy's hash-based unique took seconds on 10M gaps), a sort first otherwise. ``x`` is
    consumed (written over: every caller passes an array made for the call)."""
    out = distinct_sorted(x, consume=True)
    return out if out is not None else np.unique(x)


def owned(trace: Trace, all_params: Mapping[str, Mapping[str, float]] | None,
          claimers: Sequence[type[Rule]]) -> list[OwnedUnit]:
    """Every unit's gaps, each with the one rule that structurally owns it (module docstring).

    One compiled pass per unit gives each gap its structural owner (a walk through the sorted runs of short
    kernels beside the gaps), another the sync or blocking copy in progress as it opened; cached on the
    trace per set of ownership thresholds.
    """
    p = ownership_params(all_params, claimers)
    key = ("owned", p["min_gap_ns"], p["short_ns"], p["min_run"], tuple(r.id for r in claimers))
    if key in trace.memo:
        return trace.memo[key]
    # The copies first: their join's result is the largest transient here, and it stays under the peak
    # while the gaps, the claims and the sync calls are not loaded yet (10M kernels: 1,557 -> 1,347 MiB).
    cc = copy_calls(trace)
    taken_all = claims(trace, claimers).taken
    runs = _runs(trace, int(p["short_ns"]), int(p["min_run"]))
    syncs = _sync_calls(trace, {u.pid for u in unit_ops(trace) if u.pid is not None})
    copies = _Calls.grouped(cc.blocking_pid, cc.blocking_start, cc.blocking_end)
    out = []
    for ug, r, taken in zip(unit_gaps(trace), runs, taken_all, strict=True):
        gs, ge, pid = ug.gap_start, ug.gap_end, ug.unit.pid
        c = classify(gs, ge, taken if len(taken) else None, int(p["min_gap_ns"]), r.run_start, r.run_end,
                     r.run_id, OWNER_CODES["long_gap"], OWNER_CODES["short_runs"])
        # A gap whose idle was all claimed is no longer its owner's: the totals count the gaps keeping some.
        totals = {code: OwnedTotal(int(c.tot_ns[code]), int(c.tot_n[code])) for code in OWNER_CODES.values()}
        opened = np.zeros(len(gs), dtype=np.uint8)
        sync_calls = [_EMPTY]
        for a in range(0, len(gs), CHUNK):  # chunks keep the temporaries small
            opened[a:a + CHUNK], in_sync = _opened_in(gs[a:a + CHUNK], pid, syncs, copies)
            sync_calls.append(_distinct(in_sync))
        out.append(OwnedUnit(ug.unit, gs, ge, c.owner, c.run_idx, c.run_of, r, totals,
                             _distinct(np.concatenate(sync_calls)), opened, taken, c.left))
    del syncs, copies
    trace.memo[key] = out
    return out


def opened_count(units: list[OwnedUnit], rule: type[Rule]) -> int:
    """How many gaps opened while the calls of ``rule``'s ``opened_in`` were in progress (a sync: SYNC001; a blocking
    copy: MEM002)."""
    code = OPENED_CODES[str(rule.opened_in)]
    return sum(int(np.count_nonzero(u.opened_in == code)) for u in units)


def owned_sync_calls(units: list[OwnedUnit]) -> int:
    """How many distinct sync calls gaps opened in (one call can precede idle on several devices)."""
    by_pid: dict[int | None, list[np.ndarray]] = {}
    for u in units:
        by_pid.setdefault(u.unit.pid, []).append(u.sync_calls)
    return sum(len(_distinct(np.concatenate(parts))) for parts in by_pid.values())


def owned_top(units: list[OwnedUnit], rule: type[Rule], n: int = 20) -> list[Gap]:
    """The ``n`` longest gaps a rule owns (for a rule with ``opened_in``, SYNC001 and MEM002: that opened inside their
    calls), longest first, earliest first among equals."""
    opened = rule.opened_in is not None
    code, cands = OPENED_CODES[str(rule.opened_in)] if opened else owner_code(rule), []
    for u in units:
        of = u.opened_in if opened else u.owner
        for a in range(0, len(of), CHUNK):  # the n longest of each chunk are candidates
            idx = a + np.flatnonzero(of[a:a + CHUNK] == code)
            gs, ge = u.gap_start[idx], u.gap_end[idx]
            for i in top_order(ge - gs, gs, n):
                cands.append(Gap(u.unit.pid, u.unit.device, int(gs[i]), int(ge[i]), int(ge[i] - gs[i])))
    return sorted(cands, key=lambda c: (-c.ns, c.start_ns))[:n]


@dataclass(frozen=True)
class KernelRuns:
    """KRN001's runs that own idle, as arrays (one entry per run, any order): the runs of every unit."""

    pid: np.ndarray  # -1: unknown
    device: np.ndarray  # -1: unknown
    start_ns: np.ndarray
    end_ns: np.ndarray
    kernels: np.ndarray
    kernel_ns: np.ndarray
    idle_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.idle_ns)

    def top(self, n: int) -> list[KernelRun]:
        """The ``n`` runs with the most idle, most first (earliest first among equals)."""
        return [KernelRun(None if self.pid[i] < 0 else int(self.pid[i]),
                          None if self.device[i] < 0 else int(self.device[i]), int(self.start_ns[i]),
                          int(self.end_ns[i]), int(self.kernels[i]), int(self.kernel_ns[i]), int(self.idle_ns[i]))
                for i in top_order(self.idle_ns, self.start_ns, n)]


def krn_idle_runs(units: list[OwnedUnit]) -> KernelRuns:
    """KRN001's runs that own idle (the runs owning at least one gap), as arrays."""
    cols: list[list[np.ndarray]] = [[] for _ in range(7)]
    for u in units:
        if not len(u.krn_idx):
            continue
        # Run ids are unique and grow in time order, as the gaps do: a run's gaps are consecutive.
        first = np.flatnonzero(np.r_[True, u.krn_run[1:] != u.krn_run[:-1]])
        j = np.searchsorted(u.runs.run_id, u.krn_run[first])
        r = u.runs
        for col, v in zip(cols, (np.full(len(j), -1 if u.unit.pid is None else u.unit.pid, dtype=np.int64),
                                 np.full(len(j), -1 if u.unit.device is None else u.unit.device, dtype=np.int64),
                                 r.run_start[j], r.run_end[j], r.run_kernels[j], r.kernel_ns[j],
                                 np.add.reduceat(u.kept(u.krn_idx), first)), strict=True):
            col.append(np.asarray(v, dtype=np.int64))
    return KernelRuns(*(np.concatenate(c) if c else _EMPTY for c in cols))


def low_regions(units: list[OwnedUnit], p: Mapping[str, float]) -> list[LowRegion]:
    """GPU002's regions: merged runs of adjacent windows whose busy share is under ``max_busy_pct``.

    Windows are sized to each unit's span (span / ``max_windows``, at least ``win_min_ns``); a window's
    idle is its overlap with every gap (any owner). The gaps no other rule owns that start in a region
    are its own. Returns the regions, most owned idle first (earliest first among equals).
    """
    rows = []
    for u in units:
        if not len(u.unit) or not len(u.gap_start):
            continue
        u0, u1 = int(u.unit.start[0]), int(u.unit.end.max())
        span = u1 - u0
        if span <= 0:
            continue
        w = max(int(p["win_min_ns"]), math.ceil(span / p["max_windows"]))
        k = np.arange(-(-span // w), dtype=np.int64)
        ws, we = u0 + k * w, np.minimum(u1, u0 + (k + 1) * w)
        # Idle before t: the gaps that ended by t, plus the part of the one in progress at t.
        cum = np.r_[0, np.cumsum(u.gap_end - u.gap_start)]

        def idle_before(t: np.ndarray, u=u, cum=cum) -> np.ndarray:
            j = np.searchsorted(u.gap_end, t, side="right")
            part = np.where(j < len(u.gap_start), t - u.gap_start[np.minimum(j, len(u.gap_start) - 1)], 0)
            return cum[j] + np.maximum(part, 0)

        idle = idle_before(we) - idle_before(ws)
        length = we - ws
        with np.errstate(divide="ignore", invalid="ignore"):
            low = (idle > 0) & (length > 0) & (100.0 * (1 - idle / length) < p["max_busy_pct"])
        lk = np.flatnonzero(low)
        if not len(lk):
            continue
        starts = np.flatnonzero(np.r_[True, lk[1:] != lk[:-1] + 1])
        region = np.full(len(k), -1, dtype=np.int64)
        region[lk] = np.cumsum(np.r_[True, lk[1:] != lk[:-1] + 1]) - 1
        free = u.owner == 0 if u.unowned_left is None else u.unowned_left  # a gap with no idle left adds nothing
        owned_ns = region_sum(u.gap_start, u.gap_end, u.taken if len(u.taken) else None, free, u0, w, region,
                              len(starts))
        ends = np.r_[starts[1:], len(lk)]
        for g, (a, b) in enumerate(zip(starts, ends, strict=True)):
            ks = lk[a:b]
            rows.append(LowRegion(u.unit.pid, u.unit.device, int(ws[ks[0]]), int(we[ks[-1]]), len(ks),
                                  int(idle[ks].sum()), int(owned_ns[g])))
    return sorted(rows, key=lambda row: (-row.owned_ns, row.start_ns))
