"""What fills a report's start-up, from the idle anatomy: the host activity behind the GPU's idle in it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis import fmt
from analysis.diagnosis.idle_anatomy import entries, paint, speakers, window_idle
from analysis.diagnosis.idle_classes import WORDS
from analysis.model.capture import FLAGS, missing
from analysis.model.intervals import GPU_OPS_SQL
from analysis.model.trace import Trace
from analysis.result_parts import IdleCategory, IdleName

CONTEXT_MIN_NS = 10_000_000  # a first CUDA call this long is taken to include the CUDA context's creation

# The category that fills most of the start-up decides the advice; no category means nothing recorded.
ADVICE = {
    "allocation": ("Allocations fill it (the first one also creates the CUDA context): allocate once up front (a "
                   "caching allocator, one pinned host pool) and create the context early and once (one process per "
                   "GPU kept alive across jobs)."),
    "jit_module": ("Module loading and compilation fill it: load modules lazily (CUDA_MODULE_LOADING=LAZY, the "
                   "default since CUDA 12.2), cache JIT and compiled kernels (CUDA_CACHE_PATH, Inductor/Triton "
                   "caches) and build for the GPU's architecture."),
    "nccl_setup": ("NCCL communicator set-up fills it: create communicators once and keep them (persistent process "
                   "groups), split them instead of creating new ones (ncclCommSplit), and let NCCL connect lazily "
                   "(NCCL_RUNTIME_CONNECT=1)."),
    "mpi": "Host communication fills it (MPI set-up and exchanges before the loop): do it once, overlap it with "
           "GPU set-up, or keep the processes alive across jobs.",
    "os_io": "File and network I/O fill it (reading inputs or the data set): read in parallel or ahead, cache the "
             "data on local storage or in memory, or start profiling after loading.",
    "os_wait": "The launching thread waits on locks, sleeps or polls in it: find what it waits for (a loader, a "
               "server, another process) and start that earlier.",
    "host_cpu": ("The host computes in it (the sampled functions above): precompute or cache that work, parallelize it, "
                 "or move it out of the profiled range (nsys --capture-range=cudaProfilerApi or an NVTX range)."),
    "user_range": ("Its time is inside the NVTX ranges above: look at what they do, or sample the CPU "
                   "(nsys --sample=cpu) to see which functions run in them."),
}
UNRECORDED = ("Nothing recorded explains most of it: profile again with CPU sampling and the OS runtime trace "
              "(nsys profile --sample=cpu --trace=cuda,nvtx,osrt) to see which functions and calls fill it, or "
              "start profiling after it (--capture-range=cudaProfilerApi).")


def unrecorded(trace: Trace) -> str:
    """``UNRECORDED`` asking only for the capture flags the export did not use (``analysis.model.capture``): with
    both on, the samples and calls it has show nothing there, and NVTX ranges would."""
    flags = missing(trace)
    if len(flags) == len(FLAGS):
        return UNRECORDED
    if flags:
        return (f"Nothing recorded explains most of it: profile again with {' '.join(flags)} as well to see what fills "
                "it, or start profiling after it (--capture-range=cudaProfilerApi).")
    return ("Nothing recorded explains most of it, though the capture sampled the CPU and traced OS calls: annotate "
            "it with NVTX ranges, or start profiling after it (--capture-range=cudaProfilerApi).")


@dataclass(frozen=True)
class StartupFill:
    """The start-up's anatomy on the loop's device: idle, categories with their top names, the first CUDA call
    (when long enough to include the context's creation) and the advice for the largest category."""

    idle_ns: int
    categories: list[IdleCategory]  # each top name resolved to its text
    first_call: tuple[str, int] | None
    advice: str


def startup_fill(base: Trace, unit: tuple[int | None, int | None] | None, lo: int, hi: int) -> StartupFill | None:
    """The anatomy of ``[lo, hi)`` on ``unit`` (else the report's first device) of the whole report ``base``."""
    found = _unit_ops_in(base, unit, lo, hi)
    if found is None:
        return None
    pid, device, start, end = found
    tids = speakers(base).get((pid, device))
    gs, ge = window_idle(start, end, lo, hi)
    (entry,) = entries(base, paint(base, pid, tids, gs, ge), pid, device, tids, ["startup"]) or (None,)
    if entry is None:
        return None
    from analysis.diagnosis.idle_anatomy import resolve_names

    hashes = {t["name"] for c in entry["categories"] for t in c["top"]}
    names = resolve_names(base, hashes) if hashes else {}
    categories = [IdleCategory(category=c["category"], ns=c["ns"], top=tuple(
        IdleName(name=names.get(t["name"], "?"), ns=t["ns"], calls=t["calls"]) for t in c["top"]))
        for c in entry["categories"]]
    where = f"pid = {int(pid)}" + (f" AND tid IN ({', '.join(str(int(t)) for t in tids)})" if tids else "")
    row = base.sql(f"""SELECT name, end_ns - start_ns FROM cuda_api WHERE {where} AND start_ns >= {int(lo)}
                       AND start_ns < {int(hi)} ORDER BY start_ns LIMIT 1""") if base.has_rows("cuda_api") else []  # noqa: S608
    first = (str(row[0][0]), int(row[0][1])) if row and int(row[0][1]) >= CONTEXT_MIN_NS else None
    top = categories[0].category if categories else "none"
    advice = ADVICE.get(top) or unrecorded(base)
    if top == "user_range" and "--sample=cpu" not in missing(base):  # sampled, and nothing of it in the ranges
        advice = "Its time is inside the NVTX ranges above: look at what they do."
    return StartupFill(entry["idle_ns"], categories, first, advice)


def _unit_ops_in(base: Trace, unit: tuple[int | None, int | None] | None, lo: int, hi: int
                 ) -> tuple[int, int | None, np.ndarray, np.ndarray] | None:
    """(pid, device, start, end) of the GPU operations overlapping ``[lo, hi)`` of ``unit`` (else the report's first
    unit), sorted by (start, end) as ``unit_ops`` sorts them; None without such a unit or its process. Only the
    start-up's operations are fetched: the whole report's (``unit_ops``, millions on a long run) are not otherwise
    needed on the unwindowed report."""
    cached = base.memo.get("unit_ops")
    if cached is not None:
        units = [(u.pid, u.device) for u in cached if len(u)]
    else:
        units = base.sql(f"SELECT pid, device FROM ({GPU_OPS_SQL}) GROUP BY ALL ORDER BY ALL")  # noqa: S608 - constants
    pick = next((x for x in units if unit is not None and tuple(x) == tuple(unit)), units[0] if units else None)
    if pick is None or pick[0] is None:
        return None
    pid, device = int(pick[0]), None if pick[1] is None else int(pick[1])
    if cached is not None:
        u = next(x for x in cached if (x.pid, x.device) == (pid, device))
        return pid, device, u.start, u.end
    dev = "NULL" if device is None else str(device)
    d = base.arrays(f"""SELECT start_ns, end_ns FROM ({GPU_OPS_SQL}) WHERE pid = {pid}
                        AND device IS NOT DISTINCT FROM {dev} AND start_ns < {int(hi)} AND end_ns > {int(lo)}""")  # noqa: S608
    order = np.lexsort((d["end_ns"], d["start_ns"]))
    return pid, device, d["start_ns"][order].astype(np.int64), d["end_ns"][order].astype(np.int64)


def describe(fill: StartupFill, duration) -> str:
    """'in allocation calls 143 ms (cudaMalloc x2); sampled on CPU 76 ms (main x40) ...' for the largest
    categories, in the anatomy's words (``idle_classes.WORDS``)."""
    parts = []
    for c in fill.categories[:4]:
        names = ", ".join(f"{t.name} x{fmt.count(t.calls)}" for t in c.top[:3])
        parts.append(f"{WORDS.get(c.category, c.category)} {duration(c.ns)}" + (f" ({names})" if names else ""))
    return "; ".join(parts)
