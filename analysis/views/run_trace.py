"""All nsys reports of a run as one Chrome trace (Perfetto): one process per rank, on the run clock.

Each rank group of ``analysis.views.run_timeline`` (one profiled process of one report) becomes one trace
process named ``rank N (host)``; its GPU streams and its CUDA API / NVTX threads become threads; a flow
event joins each CUDA API call to the kernel it launched (same correlation id and process). Process
and thread names are written just before their first event, so only processes with events appear.
Times are microseconds from the run's start; at most ``max_events`` complete events in all (flows are
extra, one pair per kernel written); the output is a stream of text chunks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from analysis.views.chrome_trace import CHUNK_EVENTS, DEFAULT_MAX_EVENTS
from analysis.views.run_timeline import Part, offsets, short_host

# (table, lane kind, thread key SQL, name SQL, category SQL, args SQL, has correlation id)
_SOURCES = (
    ("kernels", "gpu", "device, stream", "name", "category",
     "{'grid': [grid_x, grid_y, grid_z], 'block': [block_x, block_y, block_z], 'correlation_id': correlation_id}"),
    ("memcpy", "gpu", "device, stream", "'Memcpy ' || coalesce(copy_kind, '')", "'memcpy'",
     "{'bytes': bytes, 'correlation_id': correlation_id}"),
    ("memset", "gpu", "device, stream", "'Memset'", "'memset'", "{'bytes': bytes, 'correlation_id': correlation_id}"),
    ("cuda_api", "api", "tid, NULL", "name", "'cuda_api'",
     "{'correlation_id': correlation_id, 'launched': EXISTS (SELECT 1 FROM kernels k WHERE "
     "k.correlation_id = cuda_api.correlation_id AND k.pid IS NOT DISTINCT FROM cuda_api.pid)}"),
    ("nvtx", "nvtx", "tid, NULL", "coalesce(text, '')", "'nvtx'", "{'domain': domain}"),
)


def _process_name(part: Part, pid: int | None, many: bool) -> str:
    host = short_host(part.host)
    who = f"rank {part.rank}" if part.rank is not None else f"pid {pid}"
    if part.rank is not None and many:
        who += f" pid {pid}"
    return who + (f" ({host})" if host else "")


class _Ids:
    """Chrome trace pids/tids handed out in order of first use, with their name events."""

    def __init__(self) -> None:
        self.pids: dict[tuple, int] = {}
        self.tids: dict[tuple, int] = {}

    def pid(self, key: tuple, name: str, out: list[str]) -> int:
        if key not in self.pids:
            self.pids[key] = len(self.pids) + 1
            out.append(json.dumps({"ph": "M", "name": "process_name", "pid": self.pids[key], "tid": 0,
                                   "args": {"name": name}}))
            out.append(json.dumps({"ph": "M", "name": "process_sort_index", "pid": self.pids[key], "tid": 0,
                                   "args": {"sort_index": self.pids[key]}}))
        return self.pids[key]

    def tid(self, key: tuple, pid: int, name: str, out: list[str]) -> int:
        if key not in self.tids:
            self.tids[key] = len(self.tids) + 1
            out.append(json.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": self.tids[key],
                                   "args": {"name": name}}))
        return self.tids[key]


def _thread_label(kind: str, a: Any, b: Any, names: dict) -> str:
    if kind == "gpu":
        return f"GPU {a} stream {b}"
    return ("CUDA API" if kind == "api" else "NVTX") + f" tid {a}" + (f" ({names[a]})" if a in names else "")


def stream_run_json(parts: list[Part], start_ns: int | None = None, end_ns: int | None = None,
                    max_events: int = DEFAULT_MAX_EVENTS) -> Iterator[str]:
    """The run's Chrome trace document as text chunks; the window is on the run clock."""
    offs, aligned = offsets(parts)
    ids = _Ids()
    yield '{"displayTimeUnit": "ns", "traceEvents": ['
    first, left, count, flows = True, max_events, 0, 0
    batch: list[str] = []

    def flush() -> Iterator[str]:
        nonlocal first, batch
        if batch:
            yield ("" if first else ",") + ",".join(batch)
            first, batch = False, []

    for i, (part, off) in enumerate(zip(parts, offs, strict=True)):
        t = part.trace
        many = len({r[0] for r in t.sql("SELECT DISTINCT pid FROM kernels")}) > 1 if t.has_rows("kernels") else False
        names = {tid: n for _p, tid, n in t.sql("SELECT pid, tid, name FROM threads") if n} \
            if t.has_rows("threads") else {}
        w0 = None if start_ns is None else int(start_ns) - off
        w1 = None if end_ns is None else int(end_ns) - off
        for table, kind, key, name, cat, args in _SOURCES:
            if left <= 0 or not t.has_rows(table):
                continue
            cur = t.con.execute(
                f"""SELECT pid, {key}, start_ns, end_ns, {name}, {cat}, {args} FROM {table}
                     WHERE end_ns IS NOT NULL AND ($w0 IS NULL OR end_ns >= $w0) AND ($w1 IS NULL OR start_ns <= $w1)
                     ORDER BY start_ns LIMIT $lim""",  # noqa: S608 - only the fixed fragments above
                {"w0": w0, "w1": w1, "lim": left})
            while rows := cur.fetchmany(CHUNK_EVENTS):
                for p, a, b, s, e, n, c, arg in rows:
                    left -= 1
                    count += 1
                    cpid = ids.pid((i, p), _process_name(part, p, many), batch)
                    ctid = ids.tid((i, p, kind, a, b), cpid, _thread_label(kind, a, b, names), batch)
                    ts = (s + off) / 1000.0
                    launched = arg.pop("launched", False)
                    batch.append(json.dumps({
                        "ph": "X", "pid": cpid, "tid": ctid, "ts": ts, "dur": max(0, e - s) / 1000.0,
                        "name": n or "", "cat": c or "", "args": {k: v for k, v in arg.items() if v is not None}}))
                    corr = arg.get("correlation_id")
                    if corr is not None and (launched or table == "kernels"):
                        # Flow ids unique per report: the report's index in the high bits.
                        fid = (i << 40) | int(corr)
                        if kind == "api":
                            batch.append(json.dumps({"ph": "s", "id": fid, "pid": cpid, "tid": ctid, "ts": ts,
                                                     "name": "launch", "cat": "launch"}))
                        elif table == "kernels":
                            flows += 1
                            batch.append(json.dumps({"ph": "f", "bp": "e", "id": fid, "pid": cpid, "tid": ctid,
                                                     "ts": ts, "name": "launch", "cat": "launch"}))
                if len(batch) >= CHUNK_EVENTS:
                    yield from flush()
    yield from flush()
    other = {"source": "goodput", "reports": [p.report_id for p in parts], "aligned": aligned,
             "window_start_ns": start_ns, "window_end_ns": end_ns, "events": count,
             "truncated": count >= max_events, "processes": len(ids.pids)}
    yield '], "otherData": ' + json.dumps(other) + "}"
