"""Per-rule case table: for every nsys rule, a planted variant of a real export where it fires (with the
impact computed here from the raw export) and a clean variant where it stays silent.

Each ``plant`` takes a writable copy of the export (and, for run-level rules, its peer) and returns the
expected impact in ns, or None when the rule must stay silent.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_type_hints

from tests.analysis.planting import (
    clone_row,
    new_string,
    open_gap,
    raw_api_names,
    raw_gaps,
    raw_gpu_ops,
    sqlite_rw,
)
from tests.analysis.rule_cases_idle import host003_fires, host004_fires, mem006_fires

DELTA = 50_000_000  # the 50 ms every planted gap or delay adds


def _syncs(con) -> list[tuple[int, int]]:
    return [(s, e) for _, s, e, n, _, _ in raw_api_names(con) if "Synchronize" in n]


def _unsynced_gaps(con) -> list[tuple[int, int, int, int]]:
    """Gaps that opened while no sync call was in progress (they are not SYNC001's)."""
    syncs = _syncs(con)
    return [g for g in raw_gaps(con) if not any(s <= g[2] <= e for s, e in syncs)]


def gpu001_fires(path: Path, peer: Path | None) -> int:
    con = sqlite_rw(path)
    gaps = _unsynced_gaps(con)
    pid, dev, gs, ge = max(gaps, key=lambda g: (g[3] - g[2], g[2]))
    # Other gaps already long enough (and not a sync's) stay GPU001's.
    others = sum(g[3] - g[2] for g in gaps if g[3] - g[2] >= 1_000_000 and g[2] != gs)
    con.close()
    open_gap(path, (gs + ge) // 2, DELTA)
    return ge - gs + DELTA + others


def idle_inside(path: Path, name_re: str) -> int:
    """The idle (NVIDIA's gaps on the raw export) during which a call of the gap's process whose name matches
    ``name_re`` was running: each gap's overlap with the union of those calls, summed."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        pattern = re.compile(name_re)
        calls: dict[int, list[tuple[int, int]]] = {}
        for _, s, e, name, pid, _ in raw_api_names(con):
            if pattern.match(name):
                calls.setdefault(pid, []).append((s, e))
        total = 0
        for pid, _dev, gs, ge in raw_gaps(con):
            at = gs
            for s, e in sorted(calls.get(pid, [])):
                lo, hi = max(s, at), min(e, ge)
                if hi > lo:
                    total += hi - lo
                    at = hi
        return total
    finally:
        con.close()


SYNC_NAMES = r"^cu(da)?(Device|Stream|Thread|Event|Ctx)Synchronize"
COPY_NAMES = r"^cu(da)?Mem(cpy|set)"


def sync001_fires(path: Path, peer: Path | None) -> int:
    con = sqlite_rw(path)
    pid, dev, gs, ge = max(_unsynced_gaps(con), key=lambda g: (g[3] - g[2], g[2]))
    rowid = next(r[0] for r in raw_api_names(con) if r[4] == pid)
    corr = con.execute("SELECT MAX(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    with con:
        # A blocking sync that started before the device drained and returned just after.
        clone_row(con, "CUPTI_ACTIVITY_KIND_RUNTIME", rowid, start=gs - 2_000, end=gs + 500,
                  nameId=new_string(con, "cudaDeviceSynchronize_v3020"), correlationId=corr)
    con.close()
    open_gap(path, (gs + ge) // 2, DELTA)
    # SYNC001 owns the idle inside sync calls only: 500 ns of the planted one, not the 50 ms after it returned.
    return idle_inside(path, SYNC_NAMES)
def drop_syncs(path: Path, peer: Path | None) -> None:
    con = sqlite_rw(path)
    with con:
        con.execute("""DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN
                       (SELECT id FROM StringIds WHERE value LIKE '%Synchronize%')""")
    con.close()


def _first_copy(con, kind: int) -> tuple[int, int, int, int, int]:
    """(rowid, start, end, correlationId, pid) of the earliest copy of a copyKind."""
    return con.execute("""SELECT rowid, start, "end", correlationId, (globalPid >> 24) & 16777215
                          FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ? ORDER BY start LIMIT 1""",
                       [kind]).fetchone()


def mem001_fires(path: Path, peer: Path | None) -> int:
    con = sqlite_rw(path)
    rowid, start, end, _, _ = _first_copy(con, 1)
    with con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcKind = 0 WHERE rowid = ?", [rowid])
    con.close()
    return end - start


def mem002_fires(path: Path, peer: Path | None) -> int:
    drop_syncs(path, peer)  # sync calls wrapped around a copy would paint its idle ``sync`` (more specific)
    con = sqlite_rw(path)
    _, start, end, corr, pid = _first_copy(con, 2)
    api = next(r for r in raw_api_names(con) if r[4] == pid and r[5] == corr)
    assert any(g[2] == end for g in raw_gaps(con)), "a gap opens as the copy ends"
    with con:
        # The call now blocks until 50 ms after its copy ended (the gap that opens then grows by those 50 ms).
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ?, \"end\" = ? WHERE rowid = ?",
                    [new_string(con, "cudaMemcpy_v3020"), end + 1_000, api[0]])
    con.close()
    open_gap(path, end + 500, DELTA)
    # MEM002 owns the idle inside synchronous copy and memset calls, all of it and only it.
    return idle_inside(path, COPY_NAMES)


def mem003_fires(path: Path, peer: Path | None) -> int:
    con = sqlite_rw(path)
    rowid, start, end, corr, pid = con.execute(
        """SELECT rowid, start, "end", correlationId, (globalPid >> 24) & 16777215
           FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY start LIMIT 1""").fetchone()
    api = next(r for r in raw_api_names(con) if r[4] == pid and r[5] == corr)
    with con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET memKind = 1 WHERE rowid = ?", [rowid])
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE rowid = ?",
                    [new_string(con, "cudaMemset_v3020"), api[0]])
    con.close()
    return end - start


def mem004_fires(path: Path, peer: Path | None) -> int:
    con = sqlite_rw(path)
    rowid, start, end, _, pid = _first_copy(con, 1)
    kernels = [(s, e) for p, _, s, e, t, _ in raw_gpu_ops(con) if t.endswith("KERNEL") and p == pid]
    with con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = 11 WHERE rowid = ?", [rowid])
    con.close()
    covered = sum(max(0, min(e, end) - max(s, start)) for s, e in kernels)  # kernels never overlap here
    return end - start - covered


def _blocking_copy_calls(con) -> list[tuple[int, int]]:
    """Synchronous memcpy calls with NVIDIA's exclusions (same-device, HtoD <= 64 KiB), from the raw export."""
    copies = {(p, c): (k, b) for p, c, k, b in con.execute(
        """SELECT (globalPid >> 24) & 16777215, correlationId, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY""")}
    out = []
    for _, s, e, name, pid, corr in raw_api_names(con):
        if "Memcpy" in name and "Async" not in name and (pid, corr) in copies:
            kind, nbytes = copies[(pid, corr)]
            if kind == 8 or (kind == 1 and nbytes <= 65536):
                continue
            out.append((s, e))
    return out


def krn001_fires(path: Path, peer: Path | None) -> int:
    """Without its per-kernel syncs, the Gaussian solver is a long run of short kernels: the small gaps
    between them (not a blocking copy's, shorter than GPU001's 1 ms) are KRN001's."""
    drop_syncs(path, peer)
    con = sqlite_rw(path)
    kernels: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for p, d, s, e, table, _ in raw_gpu_ops(con):
        if table.endswith("KERNEL"):
            kernels.setdefault((p, d), []).append((s, e))
    runs = []
    for unit, ks in kernels.items():
        run: list[tuple[int, int]] = []
        for s, e in sorted(ks) + [(0, 10**18)]:  # a sentinel long kernel closes the last run
            if e - s < KRN_SHORT_NS:
                run.append((s, e))
                continue
            if len(run) >= 20:
                runs.append((unit, run[0][0], max(x[1] for x in run)))
            run = []
    copies = _blocking_copy_calls(con)
    total = 0
    for p, d, gs, ge in raw_gaps(con):
        inside = any(u == (p, d) and r0 <= gs and ge <= r1 for u, r0, r1 in runs)
        if inside and ge - gs < 1_000_000 and not any(s <= gs <= e for s, e in copies):
            total += ge - gs
    con.close()
    return total


def _gpu002_expected(con, max_busy_pct: float = 50.0, window_min_ns: int = 1_000_000,
                     max_windows: int = 1000) -> int | None:
    """GPU002's impact on the raw export, from its published definition: each device span cut into
    windows of max(window_min, ceil(span / max_windows)); a window is low when its busy share (one minus
    its overlap with the gaps, over its length) is under max_busy_pct; GPU002 owns the gaps that start
    in a low window and that no other rule owns (no sync or blocking copy call in progress when the gap
    opened, shorter than GPU001's 1 ms; KRN001 is switched off by the case's thresholds)."""
    syncs, copies = _syncs(con), _blocking_copy_calls(con)
    spans: dict[tuple[int, int], tuple[int, int]] = {}
    for p, d, s, e, _, _ in raw_gpu_ops(con):
        lo, hi = spans.get((p, d), (s, e))
        spans[(p, d)] = (min(lo, s), max(hi, e))
    gaps = raw_gaps(con)
    total = 0
    for unit, (u0, u1) in spans.items():
        w = max(window_min_ns, -(-(u1 - u0) // max_windows))
        ugaps = [(gs, ge) for p, d, gs, ge in gaps if (p, d) == unit]
        low = set()
        for k in range(-(-(u1 - u0) // w)):
            ws, we = u0 + k * w, min(u1, u0 + (k + 1) * w)
            idle = sum(max(0, min(we, ge) - max(ws, gs)) for gs, ge in ugaps)
            if idle > 0 and 100.0 * (1 - idle / (we - ws)) < max_busy_pct:
                low.add(k)
        for gs, ge in ugaps:
            owned_elsewhere = (any(s <= gs <= e for s, e in syncs) or any(s <= gs <= e for s, e in copies)
                               or ge - gs >= 1_000_000)
            if not owned_elsewhere and (gs - u0) // w in low:
                total += ge - gs
    return total or None


def gpu002_fires(path: Path, peer: Path | None) -> int:
    """A dense export made sparse in the middle: without its one long sync (which would own every gap),
    the ten gaps that follow the middle of the trace each grow by 0.4 ms, staying under GPU001's 1 ms,
    so the GPU is busy less than half the time there in gaps no other rule explains."""
    drop_syncs(path, peer)
    con = sqlite_rw(path)
    ops = raw_gpu_ops(con)
    mid = (min(o[2] for o in ops) + max(o[3] for o in ops)) // 2
    syncs, copies = _syncs(con), _blocking_copy_calls(con)
    free = [g for g in raw_gaps(con) if g[2] >= mid and g[3] - g[2] < 500_000
            and not any(s <= g[2] <= e for s, e in syncs + copies)][:10]
    con.close()
    for g in reversed(free):  # latest first, so that the earlier gaps stay where they are
        open_gap(path, (g[2] + g[3]) // 2, 400_000)
    con = sqlite_rw(path)
    expected = _gpu002_expected(con)
    con.close()
    assert expected, "the plant must create a low-utilization region"
    return expected


def gpu002_clean(path: Path, peer: Path | None) -> None:
    drop_syncs(path, peer)  # as above, but no gap grows
    con = sqlite_rw(path)
    expected = _gpu002_expected(con)
    con.close()
    assert expected is None, "the clean export is busy enough everywhere"


KRN_SHORT_NS = 1_000_000  # every kernel of the Gaussian solver is shorter than 1 ms (the longest: 0.62 ms)

NCCL_NAME = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096UL>)"


def _add_nccl(con, start: int, end: int, stream: int | None = None) -> None:
    """An NCCL kernel on ``stream``, by default a stream of its own (on a compute stream it is COMM004's)."""
    rowid = con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1").fetchone()[0]
    corr = con.execute("SELECT MAX(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    if stream is None:
        stream = con.execute("SELECT MAX(streamId) + 1 FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    sid = new_string(con, NCCL_NAME)
    short = new_string(con, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    with con:
        clone_row(con, "CUPTI_ACTIVITY_KIND_KERNEL", rowid, start=start, end=end, correlationId=corr,
                  demangledName=sid, shortName=short, mangledName=sid, streamId=stream)


def comm001_fires(path: Path, peer: Path | None) -> int:
    con = sqlite_rw(path)
    _, _, gs, ge = max(raw_gaps(con), key=lambda g: g[3] - g[2])
    length = min(2_000_000, (ge - gs) // 2)
    _add_nccl(con, gs + 1_000, gs + 1_000 + length)  # in an idle gap: all of it exposed
    con.close()
    return length


def comm001_covered(path: Path, peer: Path | None) -> None:
    con = sqlite_rw(path)
    s, e = con.execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY "end" - start DESC').fetchone()
    _add_nccl(con, s + 10, e - 10)  # under a compute kernel: nothing exposed
    con.close()


def _nccl_start(path: Path) -> tuple[int, int]:
    con = sqlite_rw(path)
    row = con.execute("""SELECT k.rowid, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                         ON s.id = k.shortName WHERE s.value LIKE 'nccl%' ORDER BY k.start LIMIT 1""").fetchone()
    con.close()
    return row


def _move_nccl(path: Path, delta: int) -> None:
    rowid, _ = _nccl_start(path)
    con = sqlite_rw(path)
    with con:
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + ?, "end" = "end" + ? WHERE rowid = ?',
                    [delta, delta, rowid])
    con.close()


def comm002_fires(path: Path, peer: Path | None) -> int:
    # Both exports are time-normalized (absolute UTC ns), so raw starts compare directly.
    _, t0 = _nccl_start(path)
    _, t1 = _nccl_start(peer)
    _move_nccl(peer, DELTA)
    return t1 + DELTA - t0


def comm002_aligned(path: Path, peer: Path | None) -> None:
    _, t0 = _nccl_start(path)
    _, t1 = _nccl_start(peer)
    _move_nccl(peer, t0 - t1)


def unchanged(path: Path, peer: Path | None) -> None:
    return None


@dataclass(frozen=True)
class Case:
    rule: str
    corpus: str
    plant: Callable[[Path, Path | None], int | None]
    peer: str | None = None
    thresholds: dict[str, float] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.rule}-{self.plant.__name__}"

    @property
    def outcome(self) -> str:
        """'fires' or 'silent', read from the plant's declared return (an impact, or None); test_planted_case
        checks the plant returns what it declares. A plant that may return either is neither."""
        returns = get_type_hints(self.plant).get("return")
        return {int: "fires", type(None): "silent"}.get(returns, "undeclared")


NCCL_R0 = "nccl-ring-2node-r0-ault43.sqlite"
NCCL_R1 = "nccl-ring-2node-r1-ault44.sqlite"

CASES = [
    Case("GPU001", "tensorrt-3090.sqlite", gpu001_fires),
    Case("GPU001", "tensorrt-3090.sqlite", unchanged),
    Case("GPU002", "tensorrt-3090.sqlite", gpu002_fires, thresholds={"KRN001.min_run_kernels": 1e9}),
    Case("GPU002", "tensorrt-3090.sqlite", gpu002_clean, thresholds={"KRN001.min_run_kernels": 1e9}),
    Case("SYNC001", "tensorrt-3090.sqlite", sync001_fires),
    Case("SYNC001", "tensorrt-3090.sqlite", drop_syncs),
    Case("KRN001", "gaussian-threadsync.sqlite", krn001_fires, thresholds={"KRN001.short_kernel_us": 1000}),
    # Silent with the default 10 us: the solver's kernels are not short. (With every kernel counted short, the
    # idle between launches outside the per-kernel syncs is KRN001's: syncs own only the idle inside them.)
    Case("KRN001", "gaussian-threadsync.sqlite", unchanged),
    Case("MEM001", "vecadd-2026.sqlite", mem001_fires),
    Case("MEM001", "vecadd-2026.sqlite", unchanged),
    Case("MEM002", "vecadd-2026.sqlite", mem002_fires),
    Case("MEM002", "vecadd-2026.sqlite", unchanged),
    Case("MEM003", "devsync-heavy-report13.sqlite", mem003_fires),
    Case("MEM003", "devsync-heavy-report13.sqlite", unchanged),
    Case("MEM004", "vecadd-2026.sqlite", mem004_fires),
    Case("MEM004", "vecadd-2026.sqlite", unchanged),
    Case("COMM001", "vecadd-2026.sqlite", comm001_fires, thresholds={"COMM001.min_exposed_pct": 0.0}),
    Case("COMM001", "vecadd-2026.sqlite", comm001_covered, thresholds={"COMM001.min_exposed_pct": 0.0}),
    Case("COMM002", NCCL_R0, comm002_fires, peer=NCCL_R1),
    Case("COMM002", NCCL_R0, comm002_aligned, peer=NCCL_R1),
    Case("MEM006", "gaussian-threadsync.sqlite", mem006_fires),
    Case("MEM006", "gaussian-threadsync.sqlite", unchanged),
    Case("HOST003", "cupy-power-iteration.sqlite", host003_fires),
    Case("HOST003", "cupy-power-iteration.sqlite", unchanged),
    Case("HOST004", "gaussian-threadsync.sqlite", host004_fires),
    Case("HOST004", "gaussian-threadsync.sqlite", unchanged),
]
