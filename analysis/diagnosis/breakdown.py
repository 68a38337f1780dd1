"""Where a report's GPU time goes: an exact partition of each device's active span from interval unions."""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis.model.activity import UnitOps, union_ns, unit_ops
from analysis.model.intervals import COMPUTE, NCCL
from analysis.model.trace import Trace
from analysis.results import Breakdown, DeviceBreakdown

PARTS = ("compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns")


def _unit_unions(u: UnitOps) -> tuple[int, int, int, int]:
    """Union lengths of one unit's operations: all (A), compute (C), NCCL (N) and compute or NCCL (CN).

    compute = |C|; exposed comm = |C u N| - |C|; overlapped comm = |N| - exposed; memory only =
    |A| - |C u N|; idle = span - |A|. Each set is a mask over the unit's sorted arrays (no copy, no new sort).
    """
    a = union_ns(u.start, u.end)
    compute = u.cat == COMPUTE
    c = union_ns(u.start, u.end, compute)
    nccl = u.cat == NCCL
    if not nccl.any():
        return a, c, 0, c
    either = compute | nccl
    return a, c, union_ns(u.start, u.end, nccl), union_ns(u.start, u.end, either)


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 3) if whole else 0.0


def breakdown(trace: Trace) -> Breakdown:
    """Partition of the GPU-active span of every (process, device) of one report, and their sum.

    A device's span runs from its first GPU operation's start to its last one's end. Each instant of
    it is exactly one of: ``compute`` (a compute kernel runs), ``comm_exposed`` (an NCCL kernel runs
    and no compute kernel), ``memory_only`` (only copies/memsets), ``idle``. So
    ``compute_ns + comm_exposed_ns + memory_only_ns + idle_ns == span_ns`` holds per device and overall
    (the overall span is the sum of the device spans). ``comm_overlapped_ns`` is NCCL time that runs
    under compute, a part of ``compute_ns``. ``goodput_pct`` is ``compute_ns / span_ns`` in percent.

    Returns the sums (``compute_ns, comm_overlapped_ns, comm_exposed_ns, memory_only_ns, idle_ns, span_ns,
    goodput_pct, rank``) and each device's partition (``devices``: pid, device, start_ns, end_ns, the same
    parts, rank); all ``*_ns`` are ints. A report without GPU operations gets zeros and an empty ``devices`` list.

    Processes that share one GPU (the export's device table gives their device the same UUID, or bus location)
    are one device: its operations are partitioned once on its own timeline (``pid``: the lowest of them), so its
    idle is never counted twice and never exceeds its span.
    """
    rank = trace.rank
    units: list[DeviceBreakdown] = []
    for u in shared_devices(trace, [u for u in unit_ops(trace) if len(u)]):
        s0, s1 = int(u.start[0]), int(u.end.max())
        span = s1 - s0
        a, c, n, cn = _unit_unions(u)
        units.append(DeviceBreakdown(pid=u.pid, device=u.device, start_ns=s0, end_ns=s1, compute_ns=c,
                                     comm_overlapped_ns=n - (cn - c), comm_exposed_ns=cn - c, memory_only_ns=a - cn,
                                     idle_ns=span - a, span_ns=span, rank=rank, goodput_pct=_pct(c, span)))
    compute, span_ns = sum(u.compute_ns for u in units), sum(u.span_ns for u in units)
    return Breakdown(compute_ns=compute, comm_overlapped_ns=sum(u.comm_overlapped_ns for u in units),
                     comm_exposed_ns=sum(u.comm_exposed_ns for u in units),
                     memory_only_ns=sum(u.memory_only_ns for u in units), idle_ns=sum(u.idle_ns for u in units),
                     span_ns=span_ns, goodput_pct=_pct(compute, span_ns), rank=rank, devices=tuple(units))


def physical_keys(trace: Trace) -> dict[tuple[Any, Any], str]:
    """(pid, device) -> the GPU's identity (UUID, else bus location) from the export's device table; rows with no
    pid hold for every process (``(None, device)``)."""
    if not trace.has_rows("devices"):
        return {}
    rows = trace.sql("SELECT pid, device, COALESCE(uuid, bus_location) FROM devices "
                     "WHERE device IS NOT NULL AND COALESCE(uuid, bus_location) IS NOT NULL")
    return {(pid, dev): str(key) for pid, dev, key in rows}


def shared_devices(trace: Trace, units: list[UnitOps]) -> list[UnitOps]:
    """The units with those of processes that share one physical GPU merged into one (sorted by start, end; the
    lowest pid names it). Units whose GPU the export does not identify stay apart: a CUDA ordinal alone does not
    say which GPU it is (each process numbers its visible GPUs from 0)."""
    if len({u.pid for u in units}) < 2:
        return units
    keys = physical_keys(trace)
    groups: dict[Any, list[UnitOps]] = {}
    for u in units:
        key = keys.get((u.pid, u.device)) or keys.get((None, u.device))
        groups.setdefault(("gpu", key) if key is not None else ("unit", u.pid, u.device), []).append(u)
    if all(len(g) == 1 for g in groups.values()):
        return units
    out = []
    for g in groups.values():
        if len(g) == 1:
            out.append(g[0])
            continue
        start = np.concatenate([u.start for u in g])
        end = np.concatenate([u.end for u in g])
        cat = np.concatenate([u.cat for u in g])
        order = np.lexsort((end, start))
        pid = min((u.pid for u in g if u.pid is not None), default=None)
        out.append(UnitOps(pid, g[0].device, start[order], end[order], cat[order]))
    return sorted(out, key=lambda u: (u.pid is None, u.pid or 0, u.device is None, u.device or 0))

