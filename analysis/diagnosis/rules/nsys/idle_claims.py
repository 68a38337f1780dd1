"""Idle claimed by what the host was doing: rules with ``owns_idle`` take their categories' instants.

A rule class that sets ``owns_idle`` (categories of ``analysis.diagnosis.idle_classes``) owns every idle instant
painted with one of them (``analysis.diagnosis.idle_anatomy``), in the phases its ``idle_phases`` names (all when
None), whatever rule owns the gap around it (``analysis.diagnosis.rules.nsys.gaps``): the gap's owner keeps the rest
of the gap. Today: SYNC001 ``sync``, MEM002 ``sync_copy`` and ``memset``, MEM006 ``allocation`` (loop phases),
HOST003 ``mpi``, HOST004 ``jit_module``, HOST001 ``os_io``/``os_wait``/``os_other``/``off_cpu``, MEM004
``uvm_migration``; the other categories (``launch``, ``nccl_setup``, ``cuda_other``, ``user_range``, ``host_cpu``,
``none``) stay
with the gap's owner (GPU001, KRN001, GPU002 or none), which names them (GPU001: sampled functions, causes,
``setup`` for communicator and context creation; KRN001: the launch overhead of short kernels). So an idle nanosecond still has exactly one owner, and a claim names the real cause with its
share. The categories are disjoint by construction (each instant has one), which orders the claims.

The painting runs over the gap owner table's own gaps (NVIDIA's pairing, profiler overhead busy), cut at
the phase starts and at every iteration start, so a claim also knows in how many iterations it appears.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from analysis.diagnosis.idle_anatomy import NCAT, paint, resolve_names, speakers
from analysis.diagnosis.idle_classes import CATEGORIES, CODE
from analysis.diagnosis.rules.base import Rule
from analysis.loops.phases import phase_info
from analysis.model.activity import unit_gaps
from analysis.model.trace import Trace

LOOP_PHASES = ("warmup", "steady")
TOP = 8
LONG_GAP_NS = 1_000_000  # the long_gap rule's min_gap_us default (GPU001's, ``Rule.gap_role``; a test checks they agree)


@dataclass
class Claim:
    """One rule's claimed idle: ``ns`` in all, per category, the top names (name, ns, calls), per device, and in
    how many of the loop's iterations (of those the window holds) it appears."""

    rule_id: str
    ns: int = 0
    by_category: dict[str, int] = field(default_factory=dict)
    names: list[tuple[str, int, int]] = field(default_factory=list)
    name_category: dict[str, str] = field(default_factory=dict)  # each top name's category
    by_device: dict[tuple[int | None, int | None], int] = field(default_factory=dict)
    iterations_with: int = 0
    iterations: int = 0
    first_ns: int | None = None  # the first cut bin with claimed time starts here (for evidence)


@dataclass
class Claims:
    taken: list[np.ndarray]  # per unit of ``unit_gaps``, per gap: the time claimed by some rule
    by_rule: dict[str, Claim]
    # Per category, the time no rule claims in the gaps of known processes at least ``long_ns`` long (GPU001's
    # gaps): what GPU001 keeps, by what the host was doing then.
    long_by_category: dict[str, int] = field(default_factory=dict)
    long_ns: int = LONG_GAP_NS
    # Per unit of ``unit_gaps``, per gap at least ``long_ns`` long (in order): the time CUDA API calls and OS
    # runtime calls of its speaking threads cover (``Painted.cover``); None where the unit was not painted.
    cover: list[np.ndarray | None] = field(default_factory=list)


def _phase_cuts(trace: Trace) -> tuple[np.ndarray, list[str], np.ndarray, int]:
    """Cut points (phase and iteration starts), each bin's phase, each bin's iteration (-1 outside the
    loop) and the number of iterations inside the trace's window."""
    info = trace.memo.get("phase_info") or phase_info(trace)
    starts = [p.start_ns for p in info.phases]
    names = [p.name for p in info.phases]
    loop = info.loop
    cuts = np.unique(np.concatenate((np.array(starts, dtype=np.int64), loop.starts.astype(np.int64))))
    if not len(cuts):
        return cuts, ["whole"], np.full(1, -1, dtype=np.int64), 0
    ph = np.clip(np.searchsorted(np.array(starts, dtype=np.int64), cuts, side="right") - 1, 0, max(0, len(names) - 1))
    bin_phase = [names[i] if names else "whole" for i in ph]
    it = np.searchsorted(loop.starts, cuts, side="right") - 1
    in_loop = np.array([p in LOOP_PHASES for p in bin_phase]) & (it >= 0)
    bin_iter = np.where(in_loop, it, -1)
    window = getattr(trace, "window", None)
    if window is not None and len(loop):
        inside = int(((loop.starts >= window[0]) & (loop.starts < window[1])).sum())
    else:
        inside = len(loop)
    return cuts, bin_phase, bin_iter, inside


def claims(trace: Trace, claimers: Sequence[type[Rule]], long_ns: int = LONG_GAP_NS) -> Claims:
    """Every claiming rule's idle on this trace, per gap the time claimed, and what is left unclaimed in gaps
    of at least ``long_ns`` by category (cached on the trace; another ``long_ns`` paints again). ``claimers``: the
    registered rules that own idle by category (``Registry.idle_claimers``, which the engine passes down in
    ``RuleContext.claimers``: the rules call this, so it never imports their list)."""
    rules = [r for r in claimers if r.owns_idle]  # the gap table's owners claim nothing by category
    key = ("idle_claims", long_ns, tuple(r.id for r in rules))
    if key in trace.memo:
        return trace.memo[key]
    cuts, bin_phase, bin_iter, n_iter = _phase_cuts(trace)
    bins = max(1, len(cuts))
    take = np.zeros((bins, NCAT), dtype=bool)
    owner_of = np.full(NCAT, -1, dtype=np.int64)
    for i, r in enumerate(rules):
        rows = np.array([r.idle_phases is None or p in r.idle_phases for p in bin_phase], dtype=np.bool_)
        for c in r.owns_idle:
            take[rows, CODE[c]] = True
            owner_of[CODE[c]] = i
    out = Claims([], {r.id: Claim(r.id, iterations=n_iter) for r in rules}, long_ns=long_ns)
    long_total = np.zeros(NCAT, dtype=np.int64)
    names: dict[str, dict[int, list[int]]] = {r.id: {} for r in rules}
    name_cat: dict[int, int] = {}  # name hash -> the category it painted (a name belongs to one class)
    iters: dict[str, set[int]] = {r.id: set() for r in rules}
    sp = speakers(trace)
    # The breakdown's idle is the gap table's gaps plus the idle under profiler overhead (busy for the gaps):
    # both are painted in one pass, and the report's idle anatomy (``analysis.diagnosis.idle_anatomy.idle_anatomy``)
    # reuses their sum instead of painting again.
    shared: dict = {"cuts": cuts, "bin_phase": bin_phase, "units": {}}
    for ug in unit_gaps(trace):
        pid, dev = ug.unit.pid, ug.unit.device
        if not take.any() or pid is None or not len(ug.gap_start):
            out.taken.append(np.zeros(len(ug.gap_start), dtype=np.int64))
            out.cover.append(None)
            continue
        extra = ug.idle_under_busy()
        p = paint(trace, pid, sp.get((pid, dev)), ug.gap_start, ug.gap_end, cuts, take, extra, device=dev, uvm=True,
                  long=(ug.gap_end - ug.gap_start) >= long_ns)
        out.taken.append(p.taken)
        out.cover.append(p.cover)
        long_total += p.long_ns
        shared["units"][(pid, dev)] = p.plus(p.extra)
        claimed = np.where(take, p.ns, 0)
        # Per claimed category, in the order its time first appears (bin by bin): the rule's totals, the
        # iterations it appears in and the first bin's start.
        has = claimed > 0
        for code in sorted(np.flatnonzero(has.any(axis=0)).tolist(), key=lambda k: (int(np.argmax(has[:, k])), k)):
            hit = np.flatnonzero(has[:, code])
            rule = rules[owner_of[code]].id
            cl, ns = out.by_rule[rule], int(claimed[:, code].sum())
            cl.ns += ns
            cl.by_category[CATEGORIES[code]] = cl.by_category.get(CATEGORIES[code], 0) + ns
            cl.by_device[(pid, dev)] = cl.by_device.get((pid, dev), 0) + ns
            its = bin_iter[hit]
            iters[rule].update(its[its >= 0].tolist())
            if len(cuts) and (cl.first_ns is None or int(cuts[hit[0]]) < cl.first_ns):
                cl.first_ns = int(cuts[hit[0]])
        for (nb, nc, h), (nns, ncalls) in p.names.items():
            if take[nb, nc]:
                acc = names[rules[owner_of[nc]].id].setdefault(h, [0, 0])
                name_cat[h] = nc
                acc[0] += nns
                acc[1] += ncalls
    hashes = {h for per in names.values() for h in per}
    resolved = resolve_names(trace, hashes) if hashes else {}
    for rule, per in names.items():
        top = sorted(per.items(), key=lambda kv: (-kv[1][0], resolved.get(kv[0], "?")))[:TOP]
        out.by_rule[rule].names = [(resolved.get(h, "?"), v[0], v[1]) for h, v in top]
        out.by_rule[rule].name_category = {resolved.get(h, "?"): CATEGORIES[name_cat[h]] for h, _ in top}
        out.by_rule[rule].iterations_with = len(iters[rule])
    out.long_by_category = {CATEGORIES[c]: int(v) for c, v in enumerate(long_total) if v}
    if long_ns == LONG_GAP_NS:
        trace.memo["idle_painted"] = shared
    trace.memo[key] = out
    return out
