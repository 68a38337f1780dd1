"""A report's loops (their iterations, from NVTX or from the repeating GPU work) and the phases around them.

Phases with loops: ``startup`` (from the first recorded activity to the first iteration), ``warmup``
(leading iterations of the first loop well above its steady median), ``steady`` (the rest of the loops:
a program that runs several loops one after the other has them all in its steady phase, each with its
own iterations), ``epilogue`` (GPU work after the last iteration: the copies of the results back, a last
evaluation; analysed like the loop) and ``teardown`` (after the last GPU work: frees, destroys, exit).

A one-shot program (no loop) has ``startup`` (until its set-up ends: context creation, module loading,
NCCL communicators, MPI_Init, and the first allocations, all before its first GPU operation after them),
``work`` (from there to the end of its last GPU operation: the default analysis window) and
``teardown``. A report without GPU work has one phase, ``whole``.

Warm-up is a robust outlier test on the iteration times (start to next start): with ``M`` the median
and ``MAD`` the median absolute deviation, an iteration is slow when it takes more than
``M + max(WARMUP_MADS x 1.4826 x MAD, WARMUP_FLOOR x M)``; warm-up ends at the first stretch of
``SETTLE`` consecutive iterations that are not slow (looked for in the first half of the loop). Iteration times
that trend over the whole loop (a rank correlation with their order of at least ``trend.TREND_RHO`` in size, as an
elimination whose matrix shrinks each step) have no warm-up: the steady phase says they trend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from analysis import fmt
from analysis.loops import iterations as nvtx_iterations
from analysis.loops.periods import (
    OPS_CODES_SQL,
    OPS_SQL,
    Period,
    pattern_loops,
    period_in,
    sync_iterations,
    unit_period,
)
from analysis.loops.trend import is_trend, rank_trend, trend_words
from analysis.model.cuda_api import SYNC_API_RE, api_name_in
from analysis.model.trace import Trace
from analysis.readers import ToolKind
from analysis.report_types import LoopDetail, NvtxIterations

# The table the ingest writes the loop's iterations into (analysis.loops.steps writes it; the loop is read here).
ITERATIONS_TABLE = "iterations"

WARMUP_MADS = 3.0
WARMUP_FLOOR = 0.1
SETTLE = 3
RECORDS = 200  # per-iteration records in the JSON (the slowest and the first ones); all are in memory

TIMED = ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "osrt", "sync")
# Another loop before or after the main one must hold at least this share of its GPU time: set-up
# work that happens to repeat (a few identical copies or memsets) is not a loop of the program.
SECONDARY_SHARE = 0.1
STRONG_SETUP_RE = r"^(nccl(Comm(Init|Split)\w*)|P?MPI_Init\w*)"
# Set-up, by CUDA call or NVTX range name: the work window of a one-shot program starts after them.
SETUP_RE = (r"^(nccl(Comm(Init|Split)\w*|GetUniqueId)|MPI_Init\w*|PMPI_Init\w*|cu(Init|CtxCreate\w*|DevicePrimaryCtx\w*"
            r"|Module(Load\w*)|Library(Load\w*)|Link\w*)|cuda(SetDevice|Malloc\w*|HostAlloc|MallocHost|HostRegister|Free)$"
            r"|cuMem(Alloc\w*|HostAlloc|Create|Map|AddressReserve))")


@dataclass(frozen=True)
class Phase:
    name: str
    start_ns: int
    end_ns: int
    reason: str


@dataclass
class Loop:
    """A report's iterations in time order: ``starts``/``ends`` (ns) and where they came from."""

    source: str | None                     # 'nvtx' | 'kernel_pattern' | 'host_sync' | None
    starts: np.ndarray
    ends: np.ndarray
    signature: list[str] = field(default_factory=list)
    unit: tuple[int | None, int | None] | None = None
    detail: LoopDetail = field(default_factory=lambda: LoopDetail())
    reason: str | None = None
    nvtx: NvtxIterations = field(default_factory=lambda: NvtxIterations(), repr=False)  # analysis.loops.iterations' result
    # On the main loop (the one with the most GPU time): every loop of the report in time order, itself
    # included, when the report has several.
    loops: list[Loop] = field(default_factory=list, repr=False)
    gpu_ns: int = 0                        # the loop's GPU operation time (sum of durations), to rank loops

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def durations(self) -> np.ndarray:
        """Each iteration's time: to the next one's start; the last one, to its own end."""
        if not len(self.starts):
            return np.empty(0, dtype=np.int64)
        return np.r_[np.diff(self.starts), self.ends[-1] - self.starts[-1]]

    @property
    def all(self) -> list[Loop]:
        """Every loop of the report in time order (this one alone when it is the only one; none when empty)."""
        return self.loops or ([self] if len(self) else [])

    @property
    def span(self) -> tuple[int, int]:
        """First start and last end of the loop's iterations."""
        return int(self.starts[0]), int(max(self.ends.max(), self.starts[-1]))


def _signature(trace: Trace, unit: tuple[int | None, int | None], start: int, n: int = 5) -> list[str]:
    """The first kernels of an iteration (names as exported; shown escaped by every front end)."""
    pid, device = unit
    cond = ("pid IS NULL" if pid is None else f"pid = {int(pid)}") + " AND " + (
        "device IS NULL" if device is None else f"device = {int(device)}")
    return [r[0] for r in trace.sql(f"""SELECT COALESCE(name, short_name) FROM kernels WHERE {cond}
                                        AND start_ns >= {int(start)} ORDER BY start_ns LIMIT {int(n)}""")]  # noqa: S608


def _pattern_loop(trace: Trace, period: Period, its: list[tuple[int, int, int, int]], nv_reason: str | None) -> Loop:
    starts = np.array([i[0] for i in its], dtype=np.int64)
    ends = np.array([i[1] for i in its], dtype=np.int64)
    unit = (period.pid, period.device)
    loop = Loop("kernel_pattern", starts, ends, signature=_signature(trace, unit, int(starts[0]), min(5, period.length)),
                unit=unit, detail={"period_ops": period.length, "regularity": round(period.regularity, 3),
                                   "match": round(period.match, 3), "pid": period.pid, "device": period.device,
                                   "nvtx_reason": nv_reason})
    loop.gpu_ns = sum(i[3] for i in its)
    return loop


def _pattern_loops(trace: Trace, period: Period, nv_reason: str | None) -> list[Loop]:
    """The period's loops, then other loops in the unit's work before, between and after them (another
    method of a benchmark, the next phase of a solver), each with its own period; in time order."""
    found = [_pattern_loop(trace, period, its, nv_reason) for its in pattern_loops(trace, period)]
    if not found:
        return []
    top = max(x.gpu_ns for x in found)
    bounds = trace.sql(f"SELECT MIN(start_ns), MAX(start_ns) FROM ({OPS_SQL}) WHERE "  # noqa: S608 - integers
                       + ("pid IS NULL" if period.pid is None else f"pid = {int(period.pid)}") + " AND "
                       + ("device IS NULL" if period.device is None else f"device = {int(period.device)}"))[0]
    edges = [int(bounds[0])] + [t for x in found for t in (x.span[0], x.span[1] + 1)] + [int(bounds[1]) + 1]
    more: list[Loop] = []
    for lo, hi in zip(edges[::2], edges[1::2], strict=True):
        if hi <= lo:
            continue
        other = period_in(trace, period.pid, period.device, lo, hi)
        if other is None:
            continue
        for its in pattern_loops(trace, other, lo, hi):
            x = _pattern_loop(trace, other, its, nv_reason)
            if x.gpu_ns >= SECONDARY_SHARE * top:
                more.append(x)
    return sorted(found + more, key=lambda x: x.span[0])


def _nested_loop(trace: Trace, nv_reason: str | None) -> Loop | None:
    """An outer loop around inner runs of data-dependent length (``analysis.loops.nested``): the outer
    iterations are the loop's, the inner loop is structure inside them (``detail['inner']``)."""
    from analysis.loops.nested import nested_loop

    found = nested_loop(trace)
    if found is None:
        return None
    its = found.iterations
    unit = (found.pid, found.device)
    codes = f"{int(found.anchor)}, {int(found.inner_anchor)}"
    names = dict(trace.sql("SELECT code, ANY_VALUE(COALESCE(name, short_name)) FROM (SELECT hash(COALESCE(name, "  # noqa: S608 - integers
                           f"short_name, '?')) AS code, name, short_name FROM kernels) WHERE code IN ({codes}) GROUP BY code"))
    loop = Loop("kernel_pattern", np.array([i[0] for i in its], dtype=np.int64), np.array([i[1] for i in its], dtype=np.int64),
                signature=_signature(trace, unit, its[0][0], 5), unit=unit,
                detail={"nested": True, "outer_opened_by": names.get(found.anchor), "pid": found.pid, "device": found.device,
                        "inner": {"opened_by": names.get(found.inner_anchor), "period_ops": found.inner_length,
                                  "iterations": found.inner_iterations, "runs": found.inner_runs},
                        "nvtx_reason": nv_reason})
    loop.gpu_ns = sum(i[3] for i in its)
    return loop


def _nvtx_repeats(trace: Trace, starts: np.ndarray) -> bool:
    """Whether NVTX steps repeat one piece of GPU work (``analysis.loops.signatures``): a few calls of one range
    around different work (two blocks of differently shaped queries) are not a loop."""
    from analysis.loops.signatures import repeats_one, signatures

    top = trace.sql(f"SELECT pid FROM ({OPS_SQL}) WHERE pid IS NOT NULL GROUP BY pid ORDER BY COUNT(*) DESC LIMIT 1")  # noqa: S608
    if not top or len(starts) == 0:
        return True
    ops = trace.arrays(f"SELECT start_ns, (code & 4294967295)::UINTEGER AS code FROM ({OPS_CODES_SQL}) "  # noqa: S608
                       f"WHERE pid = {int(top[0][0])}")
    at = np.searchsorted(starts, ops["start_ns"], side="right") - 1
    sigs = signatures(at, ops["code"], len(starts))
    counts = np.bincount(at[at >= 0], minlength=len(starts))[:len(starts)]
    return not counts.any() or repeats_one(sigs, float(np.median(counts)))


def find_loop(trace: Trace) -> Loop:
    """The report's main loop: NVTX steps when the report has them, else the kernel pattern (several loops
    one after the other: the one with the most GPU time, with every loop in ``loops``), else the cadence
    of blocking syncs (``analysis.loops.periods``)."""
    empty = np.empty(0, dtype=np.int64)
    if trace.tool != ToolKind.NSYS:
        return Loop(None, empty, empty, reason="not an nsys report")
    nv = nvtx_iterations.iterations(trace, max_items=10**9)
    if rng := nv.get("range"):
        items = nv["items"]
        # On the GPU's timeline (the host runs ahead of it): a step starts with its first GPU operation.
        starts = np.array([i["gpu_start_ns"] if i["gpu_start_ns"] is not None else i["start_ns"] for i in items],
                          dtype=np.int64)
        ends = np.array([max(i["end_ns"], i["gpu_end_ns"] or 0) for i in items], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        if _nvtx_repeats(trace, starts[order]):
            gpu = [i["gpu_ns"] for i in items]
            nv["p99_ns"] = float(np.percentile(gpu, 99)) if gpu else None  # of the steps' projected GPU time
            return Loop("nvtx", starts[order], ends[order], signature=[rng],
                        detail={"range": rng, "domain": nv.get("domain")}, nvtx=nv)
        nv = {"has_nvtx": True, "range": None, "domain": None, "count": 0, "items": [], "slowest": [],
              "reason": f"the NVTX range {nv['range']!r} repeats, but around different GPU work each time "
                        "(no repeated signature): not a loop"}
    if not trace.has_rows("kernels"):
        return Loop(None, empty, empty, reason=nv.get("reason") or "no GPU kernels", nvtx=nv)
    period = unit_period(trace)
    loops = _pattern_loops(trace, period, nv.get("reason")) if period else []
    if loops:
        main = max(loops, key=lambda x: (x.gpu_ns, len(x)))
        if len(loops) > 1:
            main.loops = loops
        return main
    nested = _nested_loop(trace, nv.get("reason"))
    if nested is not None:
        return nested
    synced = sync_iterations(trace, api_name_in(trace, SYNC_API_RE)) if trace.has_rows("cuda_api") else []
    if synced:
        return Loop("host_sync", np.array([s[0] for s in synced], dtype=np.int64),
                    np.array([s[1] for s in synced], dtype=np.int64),
                    detail={"nvtx_reason": nv.get("reason"), "ops_median": int(np.median([s[2] for s in synced]))})
    return Loop(None, empty, empty, reason=f"{nv.get('reason')}; and no repeating sequence of GPU "
                                           "operations, nor a regular cadence of blocking syncs, covers "
                                           "most of the GPU work", nvtx=nv)


def activity_bounds(trace: Trace) -> tuple[int, int] | None:
    """First start and last end of any recorded activity of the report (host or GPU); kept in the trace's memo
    (the phases, PHASE001/002 and the verdict ask for them on a read-only report)."""
    if "activity_bounds" not in trace.memo:
        trace.memo["activity_bounds"] = _activity_bounds(trace)
    return trace.memo["activity_bounds"]


def _activity_bounds(trace: Trace) -> tuple[int, int] | None:
    parts = [f'SELECT MIN(start_ns) s, MAX(COALESCE(end_ns, start_ns)) e FROM "{t}"' for t in TIMED  # noqa: S608 - constants
             if t in trace.tables]
    if not parts:
        return None
    row = trace.sql("SELECT MIN(s), MAX(e) FROM (" + " UNION ALL ".join(parts) + ")")[0]  # noqa: S608
    return None if row[0] is None else (int(row[0]), int(row[1]))


def loop_warmup(loop: Loop) -> int:
    """How many leading iterations of ``loop`` are warm-up: none for a nested loop, whose iterations run
    their inner loops a data-dependent number of times (a long first iteration holds more work, it is not
    slower at the same work), else ``warmup_count`` of its iteration times."""
    return 0 if loop.detail.get("nested") else warmup_count(loop.durations)


def warmup_count(durations: np.ndarray) -> int:
    """How many leading iterations are warm-up (see the module docstring). None when the iteration times trend over
    the whole loop (``analysis.loops.trend``): the first iterations are then slow because the work shrinks, not
    because the loop warms up."""
    n = len(durations)
    if n < SETTLE + 1 or is_trend(rank_trend(durations)):
        return 0
    med = float(np.median(durations))
    mad = float(np.median(np.abs(durations - med)))
    limit = med + max(WARMUP_MADS * 1.4826 * mad, WARMUP_FLOOR * med)
    ok = durations <= limit
    for j in range(0, n // 2 + 1):
        if ok[j:j + SETTLE].all():
            return j
    return 0


def top_calls(trace: Trace, lo: int, hi: int, n: int = 3) -> list[tuple[str, int]]:
    """The CUDA API calls and NCCL/CUDA NVTX ranges that take the most time in ``[lo, hi)``."""
    out: list[tuple[str, int]] = []
    if trace.has_rows("cuda_api"):
        out += trace.sql(f"""SELECT name, SUM(LEAST(end_ns, {hi}) - GREATEST(start_ns, {lo}))::BIGINT AS t
                             FROM cuda_api WHERE start_ns < {hi} AND end_ns > {lo} AND name IS NOT NULL
                             GROUP BY name ORDER BY t DESC, name LIMIT {n}""")  # noqa: S608 - integers
    if trace.has_rows("nvtx"):
        out += trace.sql(f"""SELECT text, SUM(LEAST(end_ns, {hi}) - GREATEST(start_ns, {lo}))::BIGINT AS t
                             FROM nvtx WHERE start_ns < {hi} AND end_ns > {lo} AND kind <> 'mark'
                               AND regexp_matches(text, '^(nccl|cuda|cu[A-Z])')
                             GROUP BY text ORDER BY t DESC, text LIMIT {n}""")  # noqa: S608 - integers
    return sorted(((str(a), int(b)) for a, b in out), key=lambda r: (-r[1], r[0]))[:n]


def _fmt(ns: int) -> str:
    return fmt.duration(ns)


def gpu_bounds(trace: Trace) -> tuple[int, int] | None:
    """First start and last end of the report's GPU operations (unified-memory migrations included: the
    GPU works while pages move)."""
    row = trace.sql(f"""SELECT MIN(s), MAX(e) FROM (SELECT MIN(start_ns) s, MAX(end_ns) e FROM ({OPS_SQL})
                        UNION ALL SELECT MIN(start_ns), MAX(end_ns) FROM memcpy)""")[0]  # noqa: S608 - constants
    return None if row[0] is None else (int(row[0]), int(row[1]))


def _ranges(trace: Trace, rx: str, before: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of the CUDA calls and NVTX ranges whose name matches ``rx`` (starting before ``before``)."""
    cut = "" if before is None else f" AND start_ns < {int(before)}"
    parts = []
    if trace.has_rows("cuda_api"):
        parts.append(f"SELECT start_ns, end_ns FROM cuda_api WHERE regexp_matches(name, $rx){cut}")  # noqa: S608 - integers
    if trace.has_rows("nvtx"):
        parts.append(f"SELECT start_ns, end_ns FROM nvtx WHERE kind <> 'mark' AND regexp_matches(text, $rx){cut}")  # noqa: S608
    if not parts:
        return []
    rows = trace.sql(" UNION ALL ".join(parts), {"rx": rx})
    return [(int(a), int(e)) for a, e in rows if a is not None and e is not None]


def _next_op(trace: Trace, at: int) -> int | None:
    nxt = trace.scalar(f"SELECT MIN(start_ns) FROM ({OPS_SQL}) WHERE start_ns >= {int(at)}")  # noqa: S608 - integers
    return None if nxt is None else int(nxt)


def setup_end(trace: Trace, first_gpu: int) -> int:
    """Where a one-shot program's set-up ends: its first GPU operation after the NCCL communicator and
    MPI_Init set-up that began before its first kernel (the buffers cleared or filled before a
    collective are its set-up too) and outside every set-up call or range (``SETUP_RE``: GPU work
    launched inside context creation or module loading is set-up); the first GPU operation when none."""
    s = first_gpu
    first_kernel = trace.scalar("SELECT MIN(start_ns) FROM kernels")
    if first_kernel is not None:
        strong = [e for _, e in _ranges(trace, STRONG_SETUP_RE, int(first_kernel)) if e > s]
        if strong:
            s = _next_op(trace, max(strong)) or s
    calls = _ranges(trace, SETUP_RE)
    for _ in range(16):
        inside = [e for a, e in calls if a <= s < e]
        nxt = _next_op(trace, max(inside)) if inside else None
        if nxt is None:
            return s
        s = nxt
    return s


def _fill(trace: Trace, lo: int, hi: int) -> str:
    calls = top_calls(trace, lo, hi)
    return "; ".join(f"{name} {_fmt(ns)}" for name, ns in calls)


def phases(trace: Trace, loop: Loop) -> list[Phase]:
    """The report's phases in time order (see the module docstring)."""
    bounds = activity_bounds(trace)
    if bounds is None:
        return []
    t0, t1 = bounds
    gpu = gpu_bounds(trace)
    if not len(loop):
        if gpu is None:
            return [Phase("whole", t0, t1, f"no iterations found ({loop.reason})" if loop.reason else "no iterations found")]
        start = setup_end(trace, gpu[0])
        end = max(gpu[1], start)
        out = []
        if start > t0:
            fill = _fill(trace, t0, start)
            out.append(Phase("startup", t0, start, "set-up until the work starts" + (f"; {fill}" if fill else "")))
        out.append(Phase("work", start, end, "no loop: a one-shot program's work, from its first GPU operation "
                         f"after set-up to its last ({loop.reason})" if loop.reason else "no loop: one-shot work"))
        if t1 > end:
            out.append(Phase("teardown", end, t1, "after the last GPU work"))
        return out
    loops = loop.all
    first_loop = loops[0]
    w = loop_warmup(first_loop)
    first = int(first_loop.starts[0])
    last_end = max(x.span[1] for x in loops)
    t0, t1 = min(t0, first), max(t1, last_end)
    out = []
    if first > t0:
        fill = _fill(trace, t0, first)
        out.append(Phase("startup", t0, first, "until the first iteration" + (f"; {fill}" if fill else "")))
    steady_start = int(first_loop.starts[w])
    if w:
        med = float(np.median(first_loop.durations[w:]))
        out.append(Phase("warmup", first, steady_start,
                         f"{fmt.count(w)} leading iteration(s) above the steady median {_fmt(int(med))} "
                         f"(median + {fmt.exact(WARMUP_MADS)} MAD, at least +{fmt.exact(100 * WARMUP_FLOOR)}%)"))
    what = f"{fmt.count(sum(len(x) for x in loops) - w)} iteration(s) from {loop.source}" + (
        f" ({loop.detail.get('range')!r})" if loop.source == "nvtx" else "")
    if len(loops) > 1:
        what += f" in {fmt.count(len(loops))} loops one after the other"
    rho = rank_trend(first_loop.durations)
    if rho is not None and is_trend(rho):
        what += "; " + trend_words(rho, len(first_loop), "iteration times") + ": a trend, not warm-up"
    out.append(Phase("steady", steady_start, last_end, what))
    end = last_end
    # Results read back through unified-memory page faults are copied back too (``gpu_bounds`` counts them).
    if gpu is not None and gpu[1] > last_end and trace.scalar(
            f"SELECT 1 FROM (SELECT start_ns FROM ({OPS_SQL}) UNION ALL SELECT start_ns FROM memcpy) "  # noqa: S608 - integers
            f"WHERE start_ns >= {last_end} LIMIT 1") is not None:
        out.append(Phase("epilogue", last_end, gpu[1], "GPU work after the last iteration (results copied back, "
                         "a last evaluation): analysed like the loop"))
        end = gpu[1]
    if t1 > end:
        out.append(Phase("teardown", end, t1, "after the last GPU work"))
    return out


def phase_of(phase_list: list[Phase], name: str) -> Phase | None:
    return next((p for p in phase_list if p.name == name), None)


@dataclass
class PhaseInfo:
    """What the runner learns on the whole report before windowing: its loop and its phases."""

    loop: Loop
    phases: list[Phase]
    base: Trace   # the whole (unwindowed) report, for questions about other phases

def stored_loop(trace: Trace) -> Loop | None:
    """The loop the ingest found, from the file (``iterations`` and ``meta['loop']``); None when the file
    predates them or the trace is a window (its memo carries the whole report's loop)."""
    if trace.window is not None or ITERATIONS_TABLE not in trace.tables or "loop" not in trace.meta:
        return None
    facts = json.loads(trace.meta["loop"])
    d = trace.arrays(f"SELECT start_ns, own_end_ns FROM {ITERATIONS_TABLE} ORDER BY idx")  # noqa: S608 - constants
    unit = facts.get("unit")
    main = Loop(facts["source"], d["start_ns"].astype(np.int64), d["own_end_ns"].astype(np.int64),
                signature=list(facts.get("signature") or []), unit=None if unit is None else tuple(unit),
                detail=facts.get("detail") or LoopDetail(), reason=facts.get("reason"), nvtx=facts.get("nvtx") or NvtxIterations(),
                gpu_ns=int(facts.get("gpu_ns") or 0))
    main.loops = [main if x.get("main") else Loop(
        x["source"], np.array(x["starts"], dtype=np.int64), np.array(x["ends"], dtype=np.int64),
        signature=list(x.get("signature") or []), unit=None if x.get("unit") is None else tuple(x["unit"]),
        detail=x.get("detail") or LoopDetail(), gpu_ns=int(x.get("gpu_ns") or 0)) for x in facts.get("loops") or []]
    return main


def report_loop(trace: Trace) -> Loop:
    """The loop the ingest found and wrote into the file (``stored_loop``), else found now (``find_loop``). A stored
    loop without iterations is the ingest's answer too: a ``Loop``'s truth is its length, so ``stored or found``
    would look for it again (the NVTX projection and the kernel-pattern search: 20-60 ms on a small export)."""
    loop = stored_loop(trace)
    return find_loop(trace) if loop is None else loop


def phase_info(trace: Trace) -> PhaseInfo:
    """The loop and phases of a report; the runner leaves them in a windowed trace's memo, else they
    are computed here on the trace as it is (cached)."""
    info = trace.memo.get("phase_info")
    if info is None:
        loop = report_loop(trace)
        info = PhaseInfo(loop, phases(trace, loop), trace)
        trace.memo["phase_info"] = info
    return info
