"""One ingested nsys report, or a time window of it, as Chrome trace JSON (opens in Perfetto / chrome://tracing).

The output is produced as a stream of text chunks so that a large report never sits in memory as one
document. GPU work goes to one process per device (a thread per stream), NVTX ranges and CUDA API calls
to the profiled process and thread that issued them. Times are microseconds (floats) from the session
start, as the format requires; every string goes through ``json.dumps``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TypedDict

from analysis.model.trace import Trace

# Chrome trace pids for GPUs sit above any Linux pid (pid_max is at most 2**22).
GPU_PID_BASE = 1 << 24
CHUNK_EVENTS = 5000
DEFAULT_MAX_EVENTS = 2_000_000

_SOURCES = (
    # (table, SQL for pid, tid, start, end, name, category, args)
    ("kernels", f"{GPU_PID_BASE} + coalesce(device, 0)", "coalesce(stream, 0)", "name", "category",
     "{'grid': [grid_x, grid_y, grid_z], 'block': [block_x, block_y, block_z], 'correlation_id': correlation_id}"),
    ("memcpy", f"{GPU_PID_BASE} + coalesce(device, 0)", "coalesce(stream, 0)", "'Memcpy ' || coalesce(copy_kind, '')",
     "'memcpy'", "{'bytes': bytes, 'src_kind': src_kind, 'dst_kind': dst_kind, 'correlation_id': correlation_id}"),
    ("memset", f"{GPU_PID_BASE} + coalesce(device, 0)", "coalesce(stream, 0)", "'Memset'", "'memset'",
     "{'bytes': bytes, 'correlation_id': correlation_id}"),
    ("nvtx", "coalesce(pid, 0)", "coalesce(tid, 0)", "coalesce(text, '')", "'nvtx'",
     "{'domain': domain}"),
    ("cuda_api", "coalesce(pid, 0)", "coalesce(tid, 0)", "name", "'cuda_api'",
     "{'correlation_id': correlation_id}"),
)


# An event argument as the export's columns give it: a grid or block's sizes, bytes, a kind, an id, an NVTX domain.
ArgValue = str | int | float | list[int | None]


class TraceEvent(TypedDict):
    """One complete ("X") event: process and thread, start and duration in microseconds, name, category, arguments
    (the source's columns that are not NULL)."""

    ph: str
    pid: int
    tid: int
    ts: float
    dur: float
    name: str
    cat: str
    args: dict[str, ArgValue]


class NameArg(TypedDict):
    name: str


class MetadataEvent(TypedDict):
    """A process_name or thread_name ("M") event: the label Perfetto shows for a process or thread."""

    ph: str
    name: str
    pid: int
    tid: int
    args: NameArg


class OtherData(TypedDict):
    """What was written: the source, the report, the window asked for, the events and whether they were cut."""

    source: str
    report: str
    window_start_ns: int | None
    window_end_ns: int | None
    events: int
    truncated: bool


class ChromeTrace(TypedDict):
    """The whole document (``to_dict``): metadata and complete events, and what was written (``otherData``)."""

    displayTimeUnit: str
    traceEvents: list[MetadataEvent | TraceEvent]
    otherData: OtherData


def _metadata(trace: Trace) -> list[MetadataEvent]:
    """process_name / thread_name events so Perfetto labels GPUs, streams and threads."""
    events: list[MetadataEvent] = []
    for table in ("kernels", "memcpy", "memset"):
        if not trace.has_rows(table):
            continue
        for device, stream in trace.sql(
            f"SELECT DISTINCT coalesce(device, 0), coalesce(stream, 0) FROM {table}"  # noqa: S608 - fixed names
        ):
            pid = GPU_PID_BASE + int(device)
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"GPU {device}"}})
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": int(stream),
                           "args": {"name": f"stream {stream}"}})
    if trace.has_rows("processes"):
        for pid, name in trace.sql("SELECT pid, name FROM processes WHERE pid IS NOT NULL"):
            events.append({"ph": "M", "name": "process_name", "pid": int(pid), "tid": 0,
                           "args": {"name": name or str(pid)}})
    if trace.has_rows("threads"):
        for pid, tid, name in trace.sql("SELECT pid, tid, name FROM threads WHERE pid IS NOT NULL AND tid IS NOT NULL"):
            if name:
                events.append({"ph": "M", "name": "thread_name", "pid": int(pid), "tid": int(tid),
                               "args": {"name": name}})
    unique = {json.dumps(e, sort_keys=True): e for e in events}
    return list(unique.values())


def events(trace: Trace, start_ns: int | None = None, end_ns: int | None = None,
           max_events: int = DEFAULT_MAX_EVENTS) -> Iterator[TraceEvent]:
    """Complete ("X") events of the report overlapping the window, at most ``max_events`` in all."""
    left = max_events
    for table, pid, tid, name, cat, args in _SOURCES:
        if left <= 0 or not trace.has_rows(table):
            continue
        cur = trace.con.execute(
            f"""
            SELECT {pid}, {tid}, start_ns, end_ns, {name}, {cat}, {args}
              FROM {table}
             WHERE end_ns IS NOT NULL
               AND ($w0 IS NULL OR end_ns >= $w0) AND ($w1 IS NULL OR start_ns <= $w1)
             ORDER BY start_ns
             LIMIT $lim
            """,  # noqa: S608 - only the fixed fragments above are interpolated
            {"w0": start_ns, "w1": end_ns, "lim": left},
        )
        while rows := cur.fetchmany(CHUNK_EVENTS):
            for p, t, s, e, n, c, a in rows:
                left -= 1
                yield {
                    "ph": "X", "pid": int(p), "tid": int(t), "ts": s / 1000.0, "dur": max(0, e - s) / 1000.0,
                    "name": n or "", "cat": c or "", "args": {k: v for k, v in a.items() if v is not None},
                }


def stream_json(trace: Trace, start_ns: int | None = None, end_ns: int | None = None,
                max_events: int = DEFAULT_MAX_EVENTS) -> Iterator[str]:
    """The Chrome trace document as text chunks (concatenate them, or send them as a streamed response)."""
    yield '{"displayTimeUnit": "ns", "traceEvents": ['
    first = True
    count = 0
    batch: list[str] = []
    batch.extend(json.dumps(meta) for meta in _metadata(trace))
    for event in events(trace, start_ns, end_ns, max_events):
        count += 1
        batch.append(json.dumps(event))
        if len(batch) >= CHUNK_EVENTS:
            yield ("" if first else ",") + ",".join(batch)
            first = False
            batch = []
    if batch:
        yield ("" if first else ",") + ",".join(batch)
    other: OtherData = {
        "source": "goodput", "report": trace.label, "window_start_ns": start_ns, "window_end_ns": end_ns,
        "events": count, "truncated": count >= max_events,
    }
    yield '], "otherData": ' + json.dumps(other) + "}"


def to_dict(trace: Trace, start_ns: int | None = None, end_ns: int | None = None,
            max_events: int = DEFAULT_MAX_EVENTS) -> ChromeTrace:
    """The whole document as a dict (small reports and tests)."""
    return json.loads("".join(stream_json(trace, start_ns, end_ns, max_events)))
