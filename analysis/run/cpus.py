"""Ranks of one node that run on the same CPU: each rank's time on CPU per logical CPU, from the scheduler's
events, and the run warning when two ranks of a host spend most of their CPU time on the same logical CPU.

A thread's stretch on CPU runs from a switch-in to its next switch-out, on the CPU it was switched out of
(the ``off_cpu`` table's rows are the stretches between: each row's ``cpu`` is where the thread ran before
it, and the previous row's end is when it came back).

A rank (a process) is confined to the few logical CPUs that hold ``MOST`` of its threads' time on CPU when
they are at most ``FEW`` of them (bound there by its launcher or an affinity mask); a rank spread wider is not
confined and never flagged (two ranks roaming over many CPUs meet on some without taking turns). Two ranks of
one host confined to the same logical CPU ids cannot both run there at once: each waits while the other runs.
That holds whatever the CPU layout: the warning speaks of logical CPU ids (the scheduler's numbers on that
host: CPU 0 of two hosts are different CPUs) and assumes nothing about cores or hardware threads.

The layout the export records (``TARGET_INFO_SYSTEM_ENV`` ``CpuInfo``: each logical CPU's socket, and so the
host's count of logical CPUs; read at ingest as ``cpu_logical``/``cpu_sockets``) is quoted where present; no
corpus export records which logical CPUs share a core, so nothing here says they do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TypedDict

from analysis import fmt
from analysis.model.trace import Trace
from analysis.results import RunWarning

MOST = 0.9  # the share of a rank's time on CPU that its confining CPUs hold
FEW = 2     # at most this many logical CPUs: a rank bound to one or two (a chosen bound, not a core's threads)


class CpuTime(TypedDict):
    """A process's time on one logical CPU (``cpu_time``)."""

    pid: int
    cpu: int
    on_ns: int


def cpu_time(t: Trace, bounds: tuple[int, int] | None) -> list[CpuTime]:
    """Per process that calls CUDA (all processes when the report has no CUDA calls) and logical CPU, the time
    its threads ran there inside ``bounds`` (the report's window, its own times; None: all):
    ``[{pid, cpu, on_ns}]``, from the stretches between the thread's off-CPU rows."""
    if "off_cpu" not in t.tables or not t.has_rows("off_cpu"):
        return []
    lo, hi = bounds if bounds is not None else (-(2**62), 2**62)
    # A rank is a process that drives a GPU: helpers in the same report (data-loader workers, the launcher)
    # are not ranks, and sharing a CPU with them is not two ranks taking turns.
    ranks = "WHERE pid IN (SELECT DISTINCT pid FROM cuda_api)" if t.has_rows("cuda_api") else ""
    rows = t.sql(f"""
        WITH o AS (SELECT pid, tid, cpu, start_ns,
                          lag(end_ns) OVER (PARTITION BY pid, tid ORDER BY start_ns, end_ns) AS on_start
                   FROM off_cpu {ranks})
        SELECT pid, cpu, SUM(LEAST(start_ns, $hi) - GREATEST(on_start, $lo))::BIGINT AS on_ns
        FROM o WHERE on_start IS NOT NULL AND cpu IS NOT NULL AND start_ns > on_start
                 AND start_ns > $lo AND on_start < $hi
        GROUP BY pid, cpu HAVING SUM(LEAST(start_ns, $hi) - GREATEST(on_start, $lo)) > 0
        ORDER BY pid, cpu""", {"lo": int(lo), "hi": int(hi)})  # noqa: S608 - constant text
    return [{"pid": int(p), "cpu": int(c), "on_ns": int(n)} for p, c, n in rows]


class CpuLayout(TypedDict):
    """A host's recorded CPU layout: its logical CPUs and each one's socket."""

    logical: int
    socket: dict[int, int]


def cpu_layout(meta: dict[str, str]) -> CpuLayout | None:
    """The report's recorded CPU layout (``analysis.readers.nsys.guard.cpu_layout``): ``{"logical": n,
    "socket": {cpu: socket}}``, None when the export records none."""
    try:
        n = int(meta["cpu_logical"])
        socket: dict[int, int] = {}
        for part in meta["cpu_sockets"].split(","):
            span, sock = part.split(":")
            a, b = span.split("-")
            socket.update(dict.fromkeys(range(int(a), int(b) + 1), int(sock)))
    except (KeyError, ValueError):
        return None
    return {"logical": n, "socket": socket}


def _where(cpus: list[int], layout: CpuLayout | None) -> str:
    """The CPUs named as the scheduler numbers them, with what the export records of the layout."""
    ids = f"logical CPU{'s' if len(cpus) > 1 else ''} {', '.join(map(str, cpus))}"
    if layout is None:
        return f"{ids} (the scheduler's numbers; the export records no CPU layout)"
    socks = sorted({layout["socket"][c] for c in cpus if c in layout["socket"]})
    on = (f"socket {socks[0]}" if len(socks) == 1 else f"sockets {', '.join(map(str, socks))}") if socks else "no socket recorded"
    return (f"{ids} ({on}; the host has {layout['logical']} logical CPUs as the export records them, which does not "
            "say which share a core)")


@dataclass(frozen=True, slots=True)
class _Confined:
    """A rank (process) confined to few logical CPUs: its name, report, rank, those CPUs, its time on them and on any."""

    name: str
    file: str
    rank: int | None
    cpus: list[int]
    on_ns: int
    total_ns: int


def shared_cpu_warnings(reports: list[tuple[str, int | None, str | None, list[CpuTime], dict[str, str]]],
                        ) -> list[RunWarning]:
    """``reports``: each nsys report's file, rank, host, ``cpu_time`` and recorded CPU layout (its meta's
    ``cpu_logical`` and ``cpu_sockets``, see ``cpu_layout``). One
    ``shared_cpu`` warning per group of two or more ranks (processes) of one host confined to overlapping logical
    CPUs (see the module), with each rank's time on those CPUs and on any."""
    by_host: dict[str, list[_Confined]] = defaultdict(list)
    layouts: dict[str, CpuLayout | None] = {}
    for file, rank, host, cpus, layout in reports:
        if host is None:
            continue
        layouts[host] = layouts.get(host) or cpu_layout(layout)
        per_pid: dict[int, dict[int, int]] = defaultdict(dict)
        for row in cpus:
            per_pid[row["pid"]][row["cpu"]] = row["on_ns"]
        for pid, on in per_pid.items():
            total = sum(on.values())
            top = sorted(on, key=lambda c: (-on[c], c))
            held, mine = 0, []
            for c in top:
                mine.append(c)
                held += on[c]
                if held >= MOST * total:
                    break
            name = (f"rank {rank}" if rank is not None else file) + (f" pid {pid}" if len(per_pid) > 1 else "")
            if total > 0 and len(mine) <= FEW:
                by_host[host].append(_Confined(name, file, rank, sorted(mine), held, total))
    out: list[RunWarning] = []
    for host, members in sorted(by_host.items()):
        group = list(range(len(members)))  # ranks joined when their CPUs overlap (union-find)
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                if set(members[i].cpus) & set(members[j].cpus):
                    group[_root(group, j)] = _root(group, i)
        joined: dict[int, list[_Confined]] = defaultdict(list)
        for i, m in enumerate(members):
            joined[_root(group, i)].append(m)
        for ms in joined.values():
            if len(ms) < 2:
                continue
            held_cpus = sorted({c for m in ms for c in m.cpus})
            where = _where(held_cpus, layouts.get(host))
            each = "; ".join(f"{m.name} {fmt.duration(m.on_ns)} of its {fmt.duration(m.total_ns)} on CPU "
                             f"there ({fmt.share(100.0 * m.on_ns / m.total_ns)})" for m in ms)
            out.append({"code": "shared_cpu", "host": host, "cpus": held_cpus,
                        "message": f"{fmt.count(len(ms))} ranks of host {host} run on the same {where}: {each}. A logical "
                                   "CPU runs one thread at a time: they take turns there, each waiting while the other "
                                   "runs. Give each rank its own CPUs (the launcher's binding: srun --cpu-bind, mpirun "
                                   "--map-by/--bind-to, numactl).",
                        "cpu_layout": None if layouts.get(host) is None else {
                            "logical_cpus": layouts[host]["logical"],  # type: ignore[index]
                            "sockets": {str(c): layouts[host]["socket"].get(c) for c in held_cpus}},  # type: ignore[index]
                        "reports": sorted({m.file for m in ms}),
                        "ranks": sorted({m.rank for m in ms if m.rank is not None}),
                        "per_rank": [{"name": m.name, "cpus": m.cpus, "on_these_cpus_ns": m.on_ns,
                                      "on_any_cpu_ns": m.total_ns} for m in ms]})
    return out


def _root(group: list[int], i: int) -> int:
    while group[i] != i:
        i = group[i]
    return i
