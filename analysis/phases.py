"""A report's loop (its iterations, from NVTX or from the repeating GPU work) and the phases around it.

Phases: ``startup`` (from the first recorded activity to the first iteration), ``warmup`` (leading
iterations well above the steady median), ``steady`` (the rest of the loop) and ``teardown`` (after
the last iteration); a report without a loop has one phase, ``whole``.

Warm-up is a robust outlier test on the iteration times (start to next start): with ``M`` the median
and ``MAD`` the median absolute deviation, an iteration is slow when it takes more than
``M + max(WARMUP_MADS x 1.4826 x MAD, WARMUP_FLOOR x M)``; warm-up ends at the first stretch of
``SETTLE`` consecutive iterations that are not slow (looked for in the first half of the loop).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from analysis import iterations as nvtx_iterations
from analysis.cuda_api import SYNC_API_RE, api_name_in
from analysis.periods import pattern_iterations, sync_iterations, unit_period
from analysis.trace import Trace

WARMUP_MADS = 3.0
WARMUP_FLOOR = 0.1
SETTLE = 3
RECORDS = 200  # per-iteration records in the JSON (the slowest and the first ones); all are in memory

TIMED = ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "osrt", "sync")


@dataclass(frozen=True)
class Phase:
    name: str
    start_ns: int
    end_ns: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Loop:
    """A report's iterations in time order: ``starts``/``ends`` (ns) and where they came from."""

    source: str | None                     # 'nvtx' | 'kernel_pattern' | 'host_sync' | None
    starts: np.ndarray
    ends: np.ndarray
    signature: list[str] = field(default_factory=list)
    unit: tuple[int | None, int | None] | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    nvtx: dict[str, Any] = field(default_factory=dict, repr=False)  # analysis.iterations' result, all items

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def durations(self) -> np.ndarray:
        """Each iteration's time: to the next one's start; the last one, to its own end."""
        if not len(self.starts):
            return np.empty(0, dtype=np.int64)
        return np.r_[np.diff(self.starts), self.ends[-1] - self.starts[-1]]


def _signature(trace: Trace, unit: tuple[int | None, int | None], start: int, n: int = 5) -> list[str]:
    """The first kernels of an iteration (names as exported; shown escaped by every front end)."""
    pid, device = unit
    cond = ("pid IS NULL" if pid is None else f"pid = {int(pid)}") + " AND " + (
        "device IS NULL" if device is None else f"device = {int(device)}")
    return [r[0] for r in trace.sql(f"""SELECT COALESCE(name, short_name) FROM kernels WHERE {cond}
                                        AND start_ns >= {int(start)} ORDER BY start_ns LIMIT {int(n)}""")]  # noqa: S608


def find_loop(trace: Trace) -> Loop:
    """The report's iterations: NVTX steps when the report has them, else the kernel pattern, else the
    cadence of blocking syncs (``analysis.periods``)."""
    empty = np.empty(0, dtype=np.int64)
    if trace.tool != "nsys":
        return Loop(None, empty, empty, reason="not an nsys report")
    nv = nvtx_iterations.iterations(trace, max_items=10**9)
    if nv.get("range"):
        items = nv["items"]
        # On the GPU's timeline (the host runs ahead of it): a step starts with its first GPU operation.
        starts = np.array([i["gpu_start_ns"] if i["gpu_start_ns"] is not None else i["start_ns"] for i in items],
                          dtype=np.int64)
        ends = np.array([max(i["end_ns"], i["gpu_end_ns"] or 0) for i in items], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        gpu = [i["gpu_ns"] for i in items]
        nv["p99_ns"] = float(np.percentile(gpu, 99)) if gpu else None  # of the steps' projected GPU time
        return Loop("nvtx", starts[order], ends[order], signature=[nv["range"]],
                    detail={"range": nv["range"], "domain": nv.get("domain")}, nvtx=nv)
    if not trace.has_rows("kernels"):
        return Loop(None, empty, empty, reason=nv.get("reason") or "no GPU kernels", nvtx=nv)
    period = unit_period(trace)
    its = pattern_iterations(trace, period) if period else []
    if period is None or not its:
        synced = sync_iterations(trace, api_name_in(trace, SYNC_API_RE)) if trace.has_rows("cuda_api") else []
        if synced:
            return Loop("host_sync", np.array([s[0] for s in synced], dtype=np.int64),
                        np.array([s[1] for s in synced], dtype=np.int64),
                        detail={"nvtx_reason": nv.get("reason"), "ops_median": int(np.median([s[2] for s in synced]))})
        return Loop(None, empty, empty, reason=f"{nv.get('reason')}; and no repeating sequence of GPU "
                                               "operations, nor a regular cadence of blocking syncs, covers "
                                               "most of the GPU work", nvtx=nv)
    starts = np.array([i[0] for i in its], dtype=np.int64)
    ends = np.array([i[1] for i in its], dtype=np.int64)
    unit = (period.pid, period.device)
    return Loop("kernel_pattern", starts, ends, signature=_signature(trace, unit, int(starts[0]), min(5, period.length)), unit=unit,
                detail={"period_ops": period.length, "regularity": round(period.regularity, 3),
                        "match": round(period.match, 3), "pid": period.pid, "device": period.device,
                        "nvtx_reason": nv.get("reason")})


def activity_bounds(trace: Trace) -> tuple[int, int] | None:
    """First start and last end of any recorded activity of the report (host or GPU)."""
    parts = [f'SELECT MIN(start_ns) s, MAX(COALESCE(end_ns, start_ns)) e FROM "{t}"' for t in TIMED  # noqa: S608 - constants
             if t in trace.tables]
    if not parts:
        return None
    row = trace.sql("SELECT MIN(s), MAX(e) FROM (" + " UNION ALL ".join(parts) + ")")[0]  # noqa: S608
    return None if row[0] is None else (int(row[0]), int(row[1]))


def warmup_count(durations: np.ndarray) -> int:
    """How many leading iterations are warm-up (see the module docstring)."""
    n = len(durations)
    if n < SETTLE + 1:
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
    return f"{ns / 1e9:.2f} s" if ns >= 1e8 else f"{ns / 1e6:.2f} ms"


def phases(trace: Trace, loop: Loop) -> list[Phase]:
    """The report's phases in time order (one ``whole`` phase without a loop)."""
    bounds = activity_bounds(trace)
    if bounds is None:
        return []
    t0, t1 = bounds
    if not len(loop):
        return [Phase("whole", t0, t1, f"no iterations found ({loop.reason})" if loop.reason else "no iterations found")]
    w = warmup_count(loop.durations)
    first, last_end = int(loop.starts[0]), int(max(loop.ends.max(), loop.starts[-1]))
    t0, t1 = min(t0, first), max(t1, last_end)
    out: list[Phase] = []
    if first > t0:
        calls = top_calls(trace, t0, first)
        fill = "; ".join(f"{name} {_fmt(ns)}" for name, ns in calls)
        out.append(Phase("startup", t0, first, "until the first iteration" + (f"; {fill}" if fill else "")))
    steady_start = int(loop.starts[w])
    if w:
        med = float(np.median(loop.durations[w:]))
        out.append(Phase("warmup", first, steady_start,
                         f"{w} leading iteration(s) above the steady median {_fmt(int(med))} "
                         f"(median + {WARMUP_MADS:g} MAD, at least +{WARMUP_FLOOR:.0%})"))
    out.append(Phase("steady", steady_start, last_end,
                     f"{len(loop) - w} iteration(s) from {loop.source}" + (
                         f" ({loop.detail.get('range')!r})" if loop.source == "nvtx" else "")))
    if t1 > last_end:
        out.append(Phase("teardown", last_end, t1, "after the last iteration"))
    return out


def phase_of(phase_list: list[Phase], name: str) -> Phase | None:
    return next((p for p in phase_list if p.name == name), None)


@dataclass
class PhaseInfo:
    """What the runner learns on the whole report before windowing: its loop and its phases."""

    loop: Loop
    phases: list[Phase]
    base: Trace   # the whole (unwindowed) report, for questions about other phases


def phase_info(trace: Trace) -> PhaseInfo:
    """The loop and phases of a report; the runner leaves them in a windowed trace's memo, else they
    are computed here on the trace as it is (cached)."""
    info = trace.memo.get("phase_info")
    if info is None:
        # The loop the ingest found and wrote into the file (analysis.steps), else found now.
        from analysis.steps import stored_loop

        loop = stored_loop(trace) or find_loop(trace)
        info = PhaseInfo(loop, phases(trace, loop), trace)
        trace.memo["phase_info"] = info
    return info
