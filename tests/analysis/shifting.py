"""Shift invariance helpers: traces at small times and the same traces moved near 2^62, and everything the
library reports about them (every rule, every summary), with the absolute times moved back for comparison.

``write_report`` builds a normalized report in bulk; ``program`` (a hypothesis strategy) draws one rank's
training-like activity with something for every rule to find; ``shifted_copy`` moves a real ingested
report; ``everything`` collects the analysis and the summaries; ``unshift`` takes the shift back out.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
from hypothesis import strategies as st

from analysis.api import analyze
from analysis.loops.iterations import iterations
from analysis.loops.steps import write_iterations
from analysis.model.nvtx_projection import nvtx_projection
from analysis.model.trace import DUCKDB_MEMORY_BYTES, Trace
from analysis.readers.nsys.net import write_net_file
from analysis.readers.schema import NSYS_TABLES, columns, ddl
from analysis.views import chrome_trace, timeline

TIMED = [t for t in NSYS_TABLES if "start_ns" in columns(NSYS_TABLES, t)]
TIME_KEYS = ("start_ns", "end_ns", "gpu_start_ns", "gpu_end_ns")
NEAR_2_62 = 2**62
ABSOLUTE_CLOCK = 1728501278164576908  # ns since 1970 (October 2024), from the six-rank export set


def _lit(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def write_report(path: Path, meta: dict[str, Any], tables: dict[str, list[dict[str, Any]]],
                 shift: int = 0) -> Path:
    """A normalized nsys report with ``tables``' rows, every ``*_ns`` time moved by ``shift``."""
    con = duckdb.connect(str(path))
    try:
        for stmt in ddl(NSYS_TABLES):
            con.execute(stmt)
        for key, value in {"tool": "nsys", **meta}.items():
            con.execute("INSERT INTO meta VALUES (?, ?)", [key, str(value)])
        for name, rows in tables.items():
            cols = columns(NSYS_TABLES, name)
            if not rows:
                continue
            values = ", ".join(
                "(" + ", ".join(_lit(r.get(c) + shift if c.endswith("_ns") and r.get(c) is not None else r.get(c))
                                for c in cols) + ")" for r in rows)
            con.execute(f"INSERT INTO {name} VALUES {values}")  # noqa: S608 - literals of our own rows
    finally:
        con.close()
    return path


def shifted_copy(src: Path, dst: Path, shift: int, session_shift: int) -> Path:
    """A copy of an ingested report with every event time moved by ``shift`` and its session start by
    ``session_shift``."""
    shutil.copyfile(src, dst)
    con = duckdb.connect(str(dst))
    try:
        for table in TIMED:
            ends = ", end_ns = end_ns + $d" if "end_ns" in columns(NSYS_TABLES, table) else ""  # samples: points
            con.execute(f"UPDATE {table} SET start_ns = start_ns + $d{ends}", {"d": shift})  # noqa: S608
        con.execute("UPDATE meta SET value = CAST(CAST(value AS HUGEINT) + $d AS VARCHAR) "
                    "WHERE key = 'session_start_utc_ns'", {"d": session_shift})
    finally:
        con.close()
    if "net_transfers" in tables_of(dst):
        # Derived at ingest from the NVTX times too: derived again from the moved ones.
        con = duckdb.connect(str(dst))
        try:
            con.execute("DROP TABLE net_transfers")
        finally:
            con.close()
        write_net_file(dst, DUCKDB_MEMORY_BYTES)
    if "iterations" in tables_of(dst):
        # Derived at ingest from the times: derived again from the moved ones, as the ingest of the moved
        # export would.
        write_iterations(dst, DUCKDB_MEMORY_BYTES)
    return dst


def tables_of(path: Path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    finally:
        con.close()


def everything(paths: list[Path], labels: list[str], rules: list[str] | None = None) -> dict[str, Any]:
    """The analysis (every rule, report summaries) and every per-report summary the library offers."""
    out: dict[str, Any] = {"analysis": analyze(paths, labels=labels, rules=rules).to_json()}
    if rules is not None:
        return out
    for path, label in zip(paths, labels, strict=True):
        t = Trace(path, label)
        try:
            if t.tool != "nsys":
                continue  # the per-report views below are nsys timelines
            doc = chrome_trace.to_dict(t)
            out[label] = {
                "timeline": timeline.window(t, buckets=64),
                "nvtx": nvtx_projection(t, limit=None).to_json(),
                "iterations": iterations(t),
                "chrome_events": len(doc["traceEvents"]),
                "chrome_durations": sorted(round(e["dur"], 3) for e in doc["traceEvents"] if e["ph"] == "X"),
            }
        finally:
            t.close()
    return out


def unshift(value: Any, shift: int, session_shift: int, key: str | None = None) -> Any:
    """``value`` with the absolute times (``TIME_KEYS``, timeline extents and boxes, session starts) moved
    back by the shifts; everything else as it was."""
    if isinstance(value, dict):
        if key == "boxes" and "rows" in value:  # a timeline lane's boxes: {"fields": [...], "rows": [...]}
            s, e = value["fields"].index("start_ns"), value["fields"].index("end_ns")
            rows = [list(b) for b in value["rows"]]
            for b in rows:
                b[s] -= shift
                b[e] -= shift
            return {**value, "rows": rows}
        return {k: unshift(v, shift, session_shift, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "extent" and len(value) == 2:
            return [value[0] - shift, value[1] - shift]
        return [unshift(v, shift, session_shift, key) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        if key in TIME_KEYS:
            return value - shift
        if key == "session_start_utc_ns":
            return value - session_shift
    return value


# ----------------------------------------------------------------------------- a rank's activity

KERNELS = ("gemm_f32", "relu_f32", "layernorm_f16", "softmax_f32")
SAMPLE_NS = 250_000
SAMPLED = ("_PyEval_EvalFrameDefault", "main", "malloc")


def build(pid: int, device: int, start: int, steps: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """One rank's activity from step specs: ``kernels`` [(launch ns, duration, name, host delay after)],
    optional ``nccl`` (duration, host delay), ``kind`` one of none | sync | copy | async_copy | memset | uvm |
    osrt with its ``size`` (ns or count), ``overhead`` (bool) and ``tail`` (host time before the step ends).
    Every step is an NVTX push/pop range (the iteration) with a mark at its start."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    tid = pid + 1
    t, gpu, corr = start, 0, 0

    def api(s: int, e: int, name: str) -> int:
        nonlocal corr
        corr += 1
        rows["cuda_api"].append({"pid": pid, "tid": tid, "start_ns": s, "end_ns": e, "name": name,
                                 "kind": "runtime", "correlation_id": corr, "return_value": 0})
        return corr

    def gpu_op(table: str, s: int, dur: int, c: int | None, **cols: Any) -> int:
        nonlocal gpu
        s = max(gpu, s)
        stream = cols.pop("stream", 7)
        rows[table].append({"pid": pid, "tid": tid if c is not None else None, "device": device, "stream": stream,
                            "start_ns": s, "end_ns": s + dur, "correlation_id": c, **cols})
        gpu = s + dur
        return gpu

    for i, step in enumerate(steps):
        begin = t
        for launch, dur, name, delay in step["kernels"]:
            c = api(t, t + launch, "cudaLaunchKernel")
            gpu_op("kernels", t + launch // 2, dur, c, name=name, short_name=name, category="compute",
                   grid_x=64, grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1)
            t += launch + delay
        if step.get("nccl"):
            dur, delay = step["nccl"]
            c = api(t, t + 3_000, "cudaLaunchKernel")
            gpu_op("kernels", t + 1_500, dur, c, name="ncclDevKernel_AllReduce_Sum_f32",
                   short_name="ncclDevKernel_AllReduce_Sum_f32", category="nccl",
                   stream=8)  # NCCL on a stream of its own, as NCCL runs it (on the compute stream it is COMM004's)
            t += 3_000 + delay
        kind, size = step.get("kind", "none"), step.get("size", 0)
        if kind == "sync":
            # The host blocks in the sync past the GPU's last work for half the gap (waiting on another stream,
            # process or event: SYNC001's idle), then spends the other half elsewhere (GPU001's).
            end = max(gpu, t) + 2_000 + size // 2
            api(t, end, "cudaDeviceSynchronize")
            t = end + size - size // 2
        elif kind in ("copy", "async_copy"):
            sync = kind == "copy"
            c = api(t, t + 1, "cudaMemcpy" if sync else "cudaMemcpyAsync")
            done = gpu_op("memcpy", t + 2_000, size, c, copy_kind="DtoH" if sync else "HtoD", bytes=size * 7,
                          src_kind="device" if sync else "pageable", dst_kind="pageable" if sync else "device",
                          src_device=device, dst_device=None)
            end = done + 1_000 if sync else t + 4_000
            rows["cuda_api"][-1]["end_ns"] = end
            t = end + 300_000
        elif kind == "memset":
            c = api(t, t + 5_000, "cudaMemset")
            gpu_op("memset", t + 1_000, size, c, bytes=4096, value=0, mem_kind="pinned")
            t += 5_000
        elif kind == "uvm":
            for _ in range(size):
                gpu_op("memcpy", t, 20_000, None, copy_kind="UVM_HtoD", bytes=65536, src_kind="unknown",
                       dst_kind="unknown")
        elif kind == "osrt":
            rows["osrt"].append({"pid": pid, "tid": tid, "start_ns": t, "end_ns": t + size, "name": "read"})
            t += size
        if step.get("overhead"):
            rows["overhead"].append({"pid": pid, "tid": tid, "start_ns": t, "end_ns": t + 10_000,
                                     "name": "CUPTI buffer flush"})
        t += step.get("tail", 1_000)
        rows["nvtx"].append({"pid": pid, "tid": tid, "start_ns": begin, "end_ns": t, "text": f"train step {i}",
                             "domain": None, "kind": "push_pop", "nesting": 0})
        rows["nvtx"].append({"pid": pid, "tid": tid, "start_ns": begin, "end_ns": begin, "text": "mark",
                             "domain": None, "kind": "mark", "nesting": None})
    # CPU samples of the launching thread every 250 us over the whole program (HOST002).
    for i, ts in enumerate(range(start, t, SAMPLE_NS)):
        rows["cpu_samples"].append({"pid": pid, "tid": tid, "start_ns": ts, "cpu": 0,
                                    "function": SAMPLED[i % len(SAMPLED)], "module": "python3"})
    rows["processes"].append({"pid": pid, "name": "python3"})
    rows["threads"].append({"pid": pid, "tid": tid, "name": "main"})
    return rows


KINDS = ("none", "sync", "copy", "async_copy", "memset", "uvm", "osrt")
_SIZES = {"none": st.just(0), "sync": st.integers(0, 2_000_000), "copy": st.integers(5_000, 600_000),
          "async_copy": st.integers(5_000, 600_000), "memset": st.integers(1_000, 90_000),
          "uvm": st.integers(1, 5), "osrt": st.integers(100_000, 3_000_000)}


@st.composite
def program(draw: st.DrawFn, pid: int, device: int, nccl: bool) -> dict[str, list[dict[str, Any]]]:
    """One rank's steps (see ``build``): kernel launches with host delays (gaps, short-kernel runs),
    optionally a collective, and one of the other kinds of activity per step."""
    steps = []
    for _ in range(draw(st.integers(2, 4))):
        short = draw(st.booleans())
        kernels = [(draw(st.integers(1_000, 6_000)),
                    draw(st.integers(300, 9_000)) if short else draw(st.integers(10_000, 2_000_000)),
                    draw(st.sampled_from(KERNELS)), draw(st.sampled_from([0, 0, 0, 700, 30_000, 1_500_000])))
                   for _ in range(draw(st.integers(1, 25)))]
        kind = draw(st.sampled_from(KINDS))
        steps.append({"kernels": kernels, "kind": kind, "size": draw(_SIZES[kind]), "overhead": draw(st.booleans()),
                      "nccl": (draw(st.integers(20_000, 900_000)), draw(st.integers(0, 400_000))) if nccl else None,
                      "tail": draw(st.integers(1_000, 100_000))})
    return build(pid, device, draw(st.integers(0, 50_000)), steps)


def every_kind(pid: int, device: int, late_ns: int = 0) -> dict[str, list[dict[str, Any]]]:
    """A fixed rank on which every nsys rule finds something: a run of short kernels with launch gaps, long
    host gaps, each other kind of activity once, and a collective per step (``late_ns`` after the others)."""
    short = [(2_000, 1_000, "relu_f32", 3_000)] * 30
    long = [(4_000, 500_000, "gemm_f32", 0), (4_000, 300_000, "softmax_f32", 2_500_000)]
    steps = [{"kernels": short + long, "kind": kind, "size": size, "overhead": kind == "uvm",
              "nccl": (200_000, late_ns)} for kind, size in (("sync", 1_500_000), ("copy", 400_000),
                                                               ("async_copy", 300_000), ("memset", 50_000),
                                                               ("uvm", 5), ("osrt", 2_000_000))]
    return build(pid, device, 10_000 + late_ns, steps)


def merge(programs: list[dict[str, list[dict[str, Any]]]]) -> dict[str, list[dict[str, Any]]]:
    """Several processes' rows in one report."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in programs:
        for table, rows in p.items():
            out[table].extend(rows)
    return out
