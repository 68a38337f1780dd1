"""Per-step anatomy of a report's loop in the analysis window: per-iteration records, the slowest steps
with the rule that owns their extra time, and for host-paced loops the latency of each iteration.

An iteration runs from its start to the next one's start (the last one to its own end). Its record
(``analysis.loops.steps``) is exact: GPU busy is the union of the operations inside it and compute /
exposed comm / memory-only / idle are the breakdown's partition of it. The rule that owns a slow
iteration's extra time is found from the idle gaps (NVIDIA's pairing, as GPU001) that start in it,
each owned by one rule as in ``analysis.diagnosis.rules.nsys.gaps``. The iterations shown are those lying
wholly inside the analysis window. A loop is *host-paced* when the median iteration keeps the GPU busy less than
``HOST_PACED_BUSY`` of its time and the host *waits* through most of the iteration's longest idle
gap (the median over iterations of the share of that gap its launching threads spend in OS runtime
calls or blocking syncs is at least ``HOST_WAIT``; without OS runtime tracing or CPU samples, the gap with
nothing recorded counts as waiting when the host spends at most ``HOST_CALLS_MAX`` of the loop in CUDA
calls), with a regular period: the GPU waits for the next frame or request by
design. A host-paced loop also reports its headroom and, on an integrated GPU, the copies zero-copy
saves. A loop as idle whose host is busy elsewhere (data loading, Python) is starved, not paced.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

import numpy as np

from analysis import fmt
from analysis.diagnosis.rules.base import Rule
from analysis.diagnosis.rules.nsys.causes import coverage, launchers
from analysis.diagnosis.rules.nsys.common import SYNC_API_RE, api_name_in
from analysis.diagnosis.rules.nsys.gaps import owned, owner_code, owner_rules
from analysis.loops.phases import Loop
from analysis.loops.steps import records
from analysis.model.intervals import MEMORY
from analysis.model.trace import Trace
from analysis.report_types import PacedFacts, StepLatency
from analysis.result_parts import SlowStep, StepAnatomy

HOST_PACED_BUSY = 0.5
HOST_WAIT = 0.5
HOST_PACED_JITTER = 0.25
HOST_CALLS_MAX = 0.1  # without OS runtime tracing: at most this share of the loop in (non-sync) CUDA calls
INTEGRATED_RE = r"orin|tegra|xavier|jetson|thor|gb10|integrated"
SLOWEST = 5
# The step anatomy's keys in the report, in order: the records (cut) after what a host-paced loop adds.
ANATOMY_HEAD = ("steady_count", "iteration_median_ns", "jitter_pct", "gpu_duty_cycle_pct", "kind", "slowest_steps",
                "per_second")
LAUNCH_RE = r"^cu(da)?(Launch|GraphLaunch)"


def anatomy(trace: Trace, loop: Loop, all_params: Mapping[str, Mapping[str, float]],
            claimers: Sequence[type[Rule]], cols: dict[str, np.ndarray],
            unit: tuple[int | None, int | None] | None) -> StepAnatomy | None:
    """Per-iteration records and the step anatomy of the iterations that lie inside the (windowed)
    trace. ``cols``: every iteration's exact record (``analysis.loops.steps``), measured on ``unit``; ``claimers``:
    the rules that own idle, by category or in the gap table (``Registry.idle_claimers``), as the gap owners take them.
    ``records``: every kept iteration's (the report cuts them, ``StepAnatomy.for_report``); a host-paced loop's input
    wait, latency and what it could do are in ``details``, before the records in the JSON."""
    units = [u for u in owned(trace, all_params, claimers) if len(u.unit)]
    u = next((x for x in units if (x.unit.pid, x.unit.device) == unit), None)
    if u is None or not len(loop):
        return None
    lo, hi = trace.window if trace.window is not None else (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
    keep = np.flatnonzero((cols["start_ns"] >= lo) & (cols["end_ns"] <= hi))
    if len(keep) < 1:
        return None
    starts, ends = cols["start_ns"][keep], cols["end_ns"][keep]
    length = ends - starts
    busy = cols["gpu_busy_ns"][keep]
    n = len(starts)

    def per_iter(t: np.ndarray, w: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, t, side="right") - 1
        ok = (i >= 0) & (t < ends[np.maximum(i, 0)])
        return np.bincount(i[ok], weights=w[ok], minlength=n)[:n].astype(np.int64)

    gs, ge = u.gap_start, u.gap_end
    # Which rule owns an iteration's idle: the owned gaps (GPU001's pairing) that start in it.
    by_owner = {r.id: per_iter(gs[u.owner == code], (ge - gs)[u.owner == code])
                for r in owner_rules(claimers) for code in [owner_code(r)]}
    copies = u.unit.cat == MEMORY
    copy_ns = per_iter(u.unit.start[copies], (u.unit.end - u.unit.start)[copies])
    med = float(np.median(length))
    recs = records(cols, keep)
    slow: list[SlowStep] = []
    for i in np.argsort(-length, kind="stable")[:SLOWEST]:
        extra = int(length[i] - med)
        if extra <= 0:
            break
        excess = {rid: int(v[i] - np.median(v)) for rid, v in by_owner.items()}
        rid = max(excess, key=lambda r: excess[r])
        busy_excess = int(busy[i] - np.median(busy))
        owner = rid if excess[rid] >= max(busy_excess, 0) and excess[rid] > 0 else None
        # Longer GPU work made of copies (a large device-to-host read-back) is named as copies, not kernels.
        mem = cols["memory_only_ns"][keep]
        copies_excess = int(mem[i] - np.median(mem))
        what = "longer copies" if copies_excess > busy_excess / 2 and copies_excess > 0 else "longer GPU work"
        cause = (f"idle owned by {rid} (+{fmt.duration(excess[rid])} over its median per step)" if owner
                 else f"{what} (busy +{fmt.duration(busy_excess)} over the median"
                 + (f", copies alone +{fmt.duration(copies_excess)})" if what == "longer copies" else ")"))
        slow.append(SlowStep(**dataclasses.asdict(recs[i]), extra_ns=extra, owner=owner, cause=cause))
    share = busy / np.maximum(length, 1)
    duty = float(np.median(share))
    jitter = round(100.0 * float(np.percentile(length, 90) - np.percentile(length, 10)) / med, 3) if med else None
    paced = duty < HOST_PACED_BUSY and _regular(length) and host_waits(trace, u, starts) >= HOST_WAIT
    details: dict[str, object] = {}
    if paced:
        details["input_wait_ns"] = input_wait(trace, u, int(starts[0]), int(ends[-1]))
        details["latency"] = _latency(trace, u.unit.pid, starts, busy, copy_ns)
        details.update(paced_facts(trace, u.unit.pid, u.unit.device, starts, ends, med, float(np.median(busy))))
    return StepAnatomy(
        steady_count=n, iteration_median_ns=med, jitter_pct=jitter, gpu_duty_cycle_pct=round(100.0 * duty, 3),
        kind="host_paced" if paced else "throughput", slowest_steps=tuple(slow),
        per_second=round(1e9 / med, 3) if med else None,  # iterations (steps, frames, requests) per second
        records=tuple(recs), records_total=len(recs), details=details,
        keys=(*ANATOMY_HEAD, *details, "records", "records_total"))


def input_wait(trace: Trace, u, lo: int, hi: int) -> int | None:
    """What an input-paced loop costs: the GPU idle in ``[lo, hi)`` during which the process's launching threads
    wait in OS calls (reads, polls, sleeps: the input not there yet). None when the report recorded no OS
    runtime call for the process (nothing shows the wait; the idle is then the bound)."""
    pid = u.unit.pid
    tids = launchers(trace).get(int(pid)) if pid is not None else None
    if pid is None or not tids or not trace.has_rows("osrt") or trace.scalar(
            f"SELECT 1 FROM osrt WHERE pid = {int(pid)} LIMIT 1") is None:  # noqa: S608 - an integer
        return None
    gs, ge = np.maximum(u.gap_start, lo), np.minimum(u.gap_end, hi)
    ok = ge > gs
    return int(coverage(trace, "osrt", int(pid), tids, gs[ok], ge[ok]).sum()) if ok.any() else 0


def _regular(length: np.ndarray) -> bool:
    """A paced loop keeps its period: iteration times within ``HOST_PACED_JITTER`` (p90 - p10 over the median)."""
    med = float(np.median(length))
    return med > 0 and float(np.percentile(length, 90) - np.percentile(length, 10)) <= HOST_PACED_JITTER * med


def paced_facts(trace: Trace, pid: int | None, device: int | None, starts: np.ndarray, ends: np.ndarray,
                period: float, gpu: float) -> PacedFacts:
    """What a host-paced loop could do: ``headroom_per_second`` (items per second the GPU work alone would
    allow), ``headroom_x`` (that over the achieved rate) and, on an integrated GPU (Jetson/Tegra class, whose
    memory the CPU shares), ``integrated_gpu`` and the median pinned host-to-device copy time per item that
    zero-copy (mapped) memory would save."""
    out: PacedFacts = {"headroom_per_second": round(1e9 / gpu, 3) if gpu > 0 else None,
                           "headroom_x": round(period / gpu, 3) if gpu > 0 else None,
                           "integrated_gpu": integrated(trace, device)}
    if out["integrated_gpu"]:
        copies = _pinned_h2d(trace, pid, device, starts, ends)
        out["zero_copy_ns"] = copies
        out["advice"] = ("The GPU shares the CPU's memory: the pinned host-to-device copies of each item "
                         f"({fmt.duration(copies)} median) can go, by reading the host buffer in place "
                         "(cudaHostAlloc with cudaHostAllocMapped, or managed memory).")
    return out


def _pinned_h2d(trace: Trace, pid: int | None, device: int | None, starts: np.ndarray, ends: np.ndarray) -> int:
    """Median per iteration of the unit's pinned host-to-device copy time."""
    if not trace.has_rows("memcpy") or not len(starts):
        return 0
    cond = ("pid IS NULL" if pid is None else f"pid = {int(pid)}") + " AND " + (
        "device IS NULL" if device is None else f"device = {int(device)}")
    d = trace.arrays(f"SELECT start_ns, end_ns FROM memcpy WHERE {cond} AND copy_kind = 'HtoD' "  # noqa: S608 - integers
                     "AND src_kind = 'pinned' AND end_ns >= start_ns")
    i = np.searchsorted(starts, d["start_ns"], side="right") - 1
    ok = (i >= 0) & (d["start_ns"] < ends[np.maximum(i, 0)])
    per = np.bincount(i[ok], weights=(d["end_ns"] - d["start_ns"])[ok], minlength=len(starts))[:len(starts)]
    return int(np.median(per))


def integrated(trace: Trace, device: int | None) -> bool:
    """Whether the device is an integrated GPU (by its name: the export's devices do not say discrete or not)."""
    if not trace.has_rows("devices"):
        return False
    cond = "" if device is None else f" WHERE device = {int(device)} OR device IS NULL"
    names = [str(r[0]) for r in trace.sql(f"SELECT DISTINCT name FROM devices{cond}") if r[0]]  # noqa: S608 - integers
    return any(re.search(INTEGRATED_RE, n, re.IGNORECASE) for n in names)


def host_waits(trace: Trace, u, starts: np.ndarray) -> float:
    """Median over iterations of the share of the iteration's longest idle gap that the process's
    launching threads spend waiting: in OS runtime calls, or in blocking sync calls; and, when the report
    recorded no OS runtime calls for the process (nothing could show a wait), in nothing recorded at all
    (no CUDA call but syncs). The one place the pacing reads what the host did in an idle gap."""
    pid = u.unit.pid
    tids = launchers(trace).get(int(pid)) if pid is not None else None
    gs, ge = u.gap_start, u.gap_end
    if not tids or not len(gs):
        return 0.0
    it = np.searchsorted(starts, gs, side="right") - 1
    ok = it >= 0
    idx = np.flatnonzero(ok)
    # The longest gap of each iteration: sort by (iteration, length) and keep each iteration's last.
    order = idx[np.lexsort((ge[idx] - gs[idx], it[idx]))]
    last = order[np.r_[it[order][1:] != it[order][:-1], True]]
    lg, le = gs[last], ge[last]
    wait = coverage(trace, "osrt", int(pid), tids, lg, le)
    sync = api_name_in(trace, SYNC_API_RE)
    if sync != "FALSE":
        wait = np.maximum(wait, coverage(trace, "cuda_api", int(pid), tids, lg, le, sync))
    has_osrt = trace.has_rows("osrt") and trace.scalar(f"SELECT 1 FROM osrt WHERE pid = {int(pid)} LIMIT 1") is not None  # noqa: S608
    sampled = trace.has_rows("cpu_samples") and trace.scalar(
        f"SELECT 1 FROM cpu_samples WHERE pid = {int(pid)} LIMIT 1") is not None  # noqa: S608 - integers
    not_sync = f"NOT ({sync})" if sync != "FALSE" else ""
    if not has_osrt and not sampled and _host_calls_share(trace, int(pid), tids, starts, not_sync) <= HOST_CALLS_MAX:
        busy = coverage(trace, "cuda_api", int(pid), tids, lg, le, not_sync)
        wait = np.maximum(wait, (le - lg) - busy)
    return float(np.median(wait / np.maximum(le - lg, 1)))


def _host_calls_share(trace: Trace, pid: int, tids: list[int], starts: np.ndarray, extra: str) -> float:
    """Share of the loop's span its launching threads spend in CUDA calls other than syncs: a loop whose
    host launches for much of each iteration (a launch-bound loop of tiny kernels) is not waiting for
    input, whatever its unrecorded time."""
    lo, hi = np.array([int(starts[0])]), np.array([int(starts[-1]) + 1])
    if hi[0] <= lo[0]:
        return 0.0
    return float(coverage(trace, "cuda_api", pid, tids, lo, hi, extra)[0]) / float(hi[0] - lo[0])


def _latency(trace: Trace, pid: int | None, starts: np.ndarray, busy: np.ndarray, copies: np.ndarray) -> StepLatency:
    """Median per iteration of host launch time, queue delay (launch call end to the iteration's first
    GPU operation), GPU execution, copies and sync/readback (blocking sync calls)."""
    out: StepLatency = {"gpu_exec_ns": int(np.median(busy)), "copies_ns": int(np.median(copies)),
           "launch_ns": None, "queue_delay_ns": None, "sync_ns": None}
    if pid is None or not trace.has_rows("cuda_api"):
        return out
    trace.con.execute("CREATE OR REPLACE TEMP TABLE _gp_iter_starts AS "
                      "SELECT unnest($s::BIGINT[]) AS s, generate_subscripts($s::BIGINT[], 1) - 1 AS i",
                      {"s": [int(x) for x in starts]})
    launch, sync = api_name_in(trace, LAUNCH_RE), api_name_in(trace, SYNC_API_RE)
    rows = trace.sql(f"""
        WITH a AS (SELECT c.start_ns, c.end_ns, c.name, x.i FROM cuda_api c
                   ASOF JOIN _gp_iter_starts x ON c.start_ns >= x.s WHERE c.pid = {int(pid)})
        SELECT i, COALESCE(SUM(end_ns - start_ns) FILTER (WHERE {launch}), 0),
                  COALESCE(SUM(end_ns - start_ns) FILTER (WHERE {sync}), 0)
        FROM a GROUP BY i""")  # noqa: S608 - integers and server-made predicates
    q = trace.sql(f"""
        WITH k AS (SELECT k.start_ns, a.end_ns AS call_end, x.i FROM kernels k
                   JOIN cuda_api a ON a.pid = k.pid AND a.correlation_id = k.correlation_id
                   ASOF JOIN _gp_iter_starts x ON k.start_ns >= x.s WHERE k.pid = {int(pid)})
        SELECT i, arg_min(start_ns - call_end, start_ns) FROM k GROUP BY i""")  # noqa: S608 - integers
    if rows:
        out["launch_ns"] = int(np.median([r[1] for r in rows]))
        out["sync_ns"] = int(np.median([r[2] for r in rows]))
    if q:
        out["queue_delay_ns"] = int(np.median([max(int(r[1]), 0) for r in q]))
    return out
