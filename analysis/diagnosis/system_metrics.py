"""Summaries of the system metrics an export may carry: GPU metrics samples (PCIe/NVLink throughput, SM
activity) and NIC counters, per sampled device, the link throughput measured while copies ran, and the
storage I/O the OS runtime trace saw.

Each is one SQL aggregate over the normalized ``gpu_metrics`` / ``nic_metrics`` / ``osrt`` tables (empty
when the profile did not collect them: ``nsys profile --gpu-metrics-devices=all``, ``--nic-metrics=true``,
``--trace=osrt``).
"""

from __future__ import annotations

from functools import cache
from typing import TypedDict

from analysis.model.trace import Trace
from analysis.result_parts import GpuMetric, Nic, NicCounter, StorageIO, SystemMetrics

# The GPU metrics that measure a link (nsys names them e.g. 'PCIe RX Throughput [Throughput %]',
# 'NVLink TX Responses User Data [Throughput %]').
LINK_METRIC_RE = r"(?i)(pcie|nvlink|c2c)"
# The GPU metrics that measure how busy the SMs are ('SMs Active', 'SM Issue', 'Tensor Active', 'GR Active').
SM_METRIC_RE = r"(?i)(sms? active|sm issue|tensor active|gr active|warps in flight)"
# The OS runtime's file calls (HOST001's file I/O class) by what they do to storage; the rest of that class
# (open, close, stat, lseek, rename ...) is metadata.
STORAGE_KINDS: dict[str, tuple[str, ...]] = {
    "read": ("read", "pread", "readv", "preadv", "preadv2", "fread", "fgets", "getc", "fgetc", "fscanf"),
    "write": ("write", "pwrite", "writev", "pwritev", "pwritev2", "fwrite", "fputs", "putc", "fputc", "fprintf"),
    "sync": ("fsync", "fdatasync", "fflush", "sync_file_range"),
    "async": ("io_submit", "io_getevents", "io_uring_enter"),
    "copy": ("sendfile", "copy_file_range", "splice"),
}


@cache
def storage_kind_of() -> dict[str, str]:
    """Every file call name of HOST001's file I/O class with its storage kind."""
    from analysis.model.osrt import CLASSES

    kinds = {name: kind for kind, names in STORAGE_KINDS.items() for name in names}
    return {name: kinds.get(name, "metadata") for name in CLASSES["file_io"]}


def gpu_metrics_summary(trace: Trace) -> list[GpuMetric]:
    """Per sampled source (a GPU, as the export names it) and metric: samples, mean, min, max and the time
    covered (first to last sample)."""
    if not trace.has_rows("gpu_metrics"):
        return []
    rows = trace.sql("""
        SELECT source, metric, COUNT(*), avg(value), min(value), max(value), min(start_ns), max(start_ns)
        FROM gpu_metrics WHERE value IS NOT NULL GROUP BY ALL ORDER BY source, metric""")
    return [GpuMetric(source=r[0], metric=r[1], samples=int(r[2]), mean=round(float(r[3]), 6),
                      min=float(r[4]), max=float(r[5]), first_ns=int(r[6]), last_ns=int(r[7])) for r in rows]


def nic_summary(trace: Trace) -> list[NicCounter]:
    """Per NIC, port and counter: intervals, the summed value over them, the time they cover, and the rate
    (sum per second of covered time; bytes per second for a byte counter)."""
    if not trace.has_rows("nic_metrics"):
        return []
    rows = trace.sql("""
        SELECT nic, port, metric, unit, COUNT(*), sum(value), sum(end_ns - start_ns)
        FROM nic_metrics WHERE value IS NOT NULL AND end_ns > start_ns GROUP BY ALL ORDER BY nic, port, metric""")
    return [NicCounter(nic=r[0], port=r[1], metric=r[2], unit=r[3], intervals=int(r[4]),
                       total=float(r[5]), covered_ns=int(r[6]),
                       per_second=round(float(r[5]) * 1e9 / int(r[6]), 6)) for r in rows]


def nic_inventory(trace: Trace) -> list[Nic]:
    """The host's network interfaces as nsys listed them (name, link layer, model, state), by NIC id."""
    if not trace.has_rows("nics"):
        return []
    rows = trace.sql("SELECT nic_id, name, link_layer, model, state FROM nics ORDER BY nic_id, name")
    return [Nic(nic_id=r[0], name=r[1], link_layer=r[2], model=r[3], state=r[4]) for r in rows]


def storage_summary(trace: Trace) -> list[StorageIO]:
    """Storage I/O as the OS runtime trace saw it, per process and kind (read, write, sync, async, copy,
    metadata): calls, threads, time in the calls and the longest call. The trace records calls, not bytes
    or file names; read/write on pipes and sockets count too (the OS call cannot tell them apart)."""
    if not trace.has_rows("osrt"):
        return []
    names = list(storage_kind_of().items())
    rows = trace.sql("""
        WITH kinds AS (SELECT unnest($names) AS name, unnest($kinds) AS kind),
             calls AS (SELECT pid, tid, end_ns - start_ns AS d,
                              regexp_replace(ltrim(name, '_'), '64$', '') AS base
                       FROM osrt WHERE end_ns >= start_ns)
        SELECT c.pid, k.kind, COUNT(*), COUNT(DISTINCT c.tid), SUM(c.d)::BIGINT, MAX(c.d)
        FROM calls c JOIN kinds k ON k.name = c.base
        GROUP BY ALL ORDER BY c.pid, SUM(c.d) DESC, k.kind""",
                     {"names": [n for n, _ in names], "kinds": [k for _, k in names]})
    return [StorageIO(pid=r[0], kind=r[1], calls=int(r[2]), threads=int(r[3]), total_ns=int(r[4]),
                      max_ns=int(r[5])) for r in rows]


def system_metrics(trace: Trace) -> SystemMetrics | None:
    """The report summary's ``system_metrics`` object (GPU metrics, NIC counters, the NIC inventory, storage
    I/O from the OS runtime trace), or None when the export has none of them."""
    gpu, nic, nics = gpu_metrics_summary(trace), nic_summary(trace), nic_inventory(trace)
    storage = storage_summary(trace)
    if not gpu and not nic and not nics and not storage:
        return None
    return SystemMetrics(gpu=tuple(gpu), nic=tuple(nic), nics=tuple(nics), storage=tuple(storage))


class LinkDuringCopies(TypedDict):
    """A link metric (PCIe, NVLink, C2C) of one source sampled while copies ran, beside its mean over the capture."""

    source: str
    metric: str
    samples: int
    mean_during_copies: float
    max_during_copies: float
    mean_whole_capture: float


class SampledDuring(TypedDict):
    """A GPU metric of one source sampled inside some intervals, beside its mean over the capture."""

    source: str
    metric: str
    samples: int
    mean_during: float
    max_during: float
    mean_whole_capture: float


def link_during_copies(trace: Trace, copy_kinds: list[str]) -> list[LinkDuringCopies]:
    """Link metrics (PCIe, NVLink, C2C) sampled while a copy of one of ``copy_kinds`` ran, per source and
    metric: samples, mean and max, next to the mean over the whole capture. Empty without such samples.

    Every source counts: the export names a sampled GPU only by text, not by the CUDA ordinal copies carry.
    """
    if not trace.has_rows("gpu_metrics") or not copy_kinds:
        return []
    rows = trace.sql("""
        WITH link AS (SELECT source, metric, start_ns, value FROM gpu_metrics
                      WHERE value IS NOT NULL AND regexp_matches(metric, $re)),
             during AS (SELECT DISTINCT l.source, l.metric, l.start_ns, l.value FROM link l
                        JOIN memcpy m ON l.start_ns >= m.start_ns AND l.start_ns <= m.end_ns
                        WHERE list_contains($kinds, m.copy_kind)),
             d AS (SELECT source, metric, COUNT(*) AS n, avg(value) AS mean, max(value) AS top FROM during GROUP BY ALL),
             a AS (SELECT source, metric, avg(value) AS mean FROM link GROUP BY ALL)
        SELECT d.source, d.metric, d.n, d.mean, d.top, a.mean FROM d JOIN a USING (source, metric)
        ORDER BY d.source, d.metric""", {"re": LINK_METRIC_RE, "kinds": list(copy_kinds)})
    return [{"source": r[0], "metric": r[1], "samples": int(r[2]), "mean_during_copies": round(float(r[3]), 6),
             "max_during_copies": float(r[4]), "mean_whole_capture": round(float(r[5]), 6)} for r in rows]


def sampled_during(trace: Trace, metric_re: str, intervals: list[tuple[int, int]]) -> list[SampledDuring]:
    """GPU metrics whose name matches ``metric_re`` sampled inside any of ``intervals`` ``[start, end]``, per
    source and metric: samples, mean and max, next to the mean over the whole capture. Empty without such
    samples (the intervals are a bounded evidence set, one SQL join)."""
    if not intervals or not trace.has_rows("gpu_metrics"):
        return []
    values = ", ".join(f"({int(a)}, {int(b)})" for a, b in intervals)
    rows = trace.sql(f"""
        WITH iv(s, e) AS (VALUES {values}),
             m AS (SELECT source, metric, start_ns, value FROM gpu_metrics
                   WHERE value IS NOT NULL AND regexp_matches(metric, $re)),
             during AS (SELECT source, metric, start_ns, value FROM m
                        WHERE EXISTS (SELECT 1 FROM iv WHERE m.start_ns >= iv.s AND m.start_ns <= iv.e)),
             d AS (SELECT source, metric, COUNT(*) AS n, avg(value) AS mean, max(value) AS top FROM during GROUP BY ALL),
             a AS (SELECT source, metric, avg(value) AS mean FROM m GROUP BY ALL)
        SELECT d.source, d.metric, d.n, d.mean, d.top, a.mean FROM d JOIN a USING (source, metric)
        ORDER BY d.source, d.metric""", {"re": metric_re})  # noqa: S608 - integers only
    return [{"source": r[0], "metric": r[1], "samples": int(r[2]), "mean_during": round(float(r[3]), 6),
             "max_during": float(r[4]), "mean_whole_capture": round(float(r[5]), 6)} for r in rows]
