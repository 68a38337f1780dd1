"""Several NCCL logs of one job (one file per rank or per node, ``NCCL_DEBUG_FILE=%h.%p``) as one log.

Each file is ingested on its own (``ingest``); ``load_job`` reads their tables back, sorts them into jobs and
merges the first job's files into one ``NcclLog``: one network path for the job.

Which files belong to one job. A process of a job holds one rank per communicator, every rank of a job inits
its world communicator, and all ranks load one NCCL: so two files are of different jobs when

* they name different NCCL versions;
* both name communicator ids (``commId``, NCCL 2.9+) and share none;
* one rank of a communicator is a different process (host and pid) in each, or one process a different rank
  (a restarted job has new pids: it is another run);
* their world communicators have different sizes.

A file that contradicts none of that joins the job (a file without init lines, such as a job's stdout with
nccl-tests' tables, cannot be told apart and joins). The files of other jobs are left out of the path, each
with the reason; byte-identical files count once.

Merging. Line numbers run on from file to file (``Source``: the file of each line, ``NcclLog.where``); a row
several files print (a rank's init line in a per-node and a per-rank file, the same NIC list printed by every
rank) is kept once, by the key the reader dedups it on within one file; counts are summed, but a process's WARN lines
count once (the most any file holds of them: ``nccl_warning_procs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from analysis.readers.nccl.model import NcclLog, Source
from analysis.readers.nccl.parsed import (
    MAX_CONNECTIONS,
    MAX_FAILURE_LINES,
    MAX_RANKS,
    MAX_SMALL,
    MAX_WARNINGS_PER_KIND,
)
from analysis.readers.nccl.schema import Cell, RawTables, StoredMeta, Tables
from analysis.readers.nccl.store import build, read_many, typed

Row = dict[str, Cell]   # a row of any table, as read: merged by the columns ``_KEYED`` and the rest name

# table -> the columns a row is the same row by (as the reader dedups within one file), and the columns summed.
_KEYED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nccl_ranks": (("comm_id", "rank", "host", "pid"), ()),
    "nccl_labels": (("label", "host", "pid"), ()),
    "nccl_devices": (("rank", "pid", "host", "device"), ()),
    "nccl_nics": (("host", "net", "idx", "name"), ()),
    "nccl_net_notes": (("kind", "what", "host", "text"), ("repeats",)),
    "nccl_networks": (("name",), ("lines",)),
    "nccl_oob": (("host",), ()),
    "nccl_gdr": (("host", "scope", "gpu", "hca", "enabled", "reason"), ("repeats",)),
    "nccl_connections": (("channel", "conn", "src", "dst", "direction", "transport"), ()),
    "nccl_trees": (("channel", "rank"), ()),
    "nccl_env": (("name",), ("count",)),
    "nccl_algo_calls": (("coll", "bytes", "algo", "proto", "channels"), ("calls",)),
    "nccl_tuning": (("coll", "algo", "proto"), ()),
    "nccl_p2p_refused": (("host", "dev_a", "dev_b"), ("count",)),
    "nccl_counters": (("name",), ("value",)),
    "nccl_warning_counts": (("kind",), ("count",)),
}
# Rows of one process's own output, kept once when two files both hold them (files that overlap).
_ONCE_ACROSS_FILES = {
    "nccl_warnings": ("kind", "message", "host", "pid", "tid", "dev", "label", "source"),
    "nccl_failures": ("label", "kind", "text"),
    "nccl_tests_rows": ("size", "count", "type", "redop", "root", "oop_time_us", "oop_algbw", "oop_busbw",
                        "oop_wrong", "ip_time_us", "ip_algbw", "ip_busbw", "ip_wrong"),
}
_CAPS = {"nccl_warnings": MAX_WARNINGS_PER_KIND, "nccl_failures": MAX_FAILURE_LINES}
# The merged log keeps what one log may (``parsed``): the rows past a cap are counted, not kept.
_KEYED_CAPS = {"nccl_connections": MAX_CONNECTIONS, "nccl_ranks": MAX_RANKS, "nccl_trees": MAX_RANKS,
               "nccl_tests_rows": 100_000}


@dataclass(frozen=True)
class LeftOut:
    index: int   # in the files given
    file: str
    reason: str


@dataclass(frozen=True)
class Job:
    """The merged log of the first file's job, the files in it, and the files left out (another job, or the
    same bytes as a file already in)."""

    log: NcclLog
    files: tuple[str, ...]
    members: tuple[int, ...]   # the files' indexes in the files given
    left_out: tuple[LeftOut, ...]
    joined_by: tuple[str, ...]  # per file after the first: what ties it to the job ("commId 0x..", "nothing")
    summaries: tuple[LogSummary, ...] = ()  # per file given, its own log's ``summary`` (read once, here)


class LogSummary(TypedDict):
    """One log's ``summary``: its NCCL version, hosts, and counts of nodes, ranks, NICs and WARN lines."""

    version: str | None
    hosts: list[str]
    counts: dict[str, int]


def summary(log: NcclLog) -> LogSummary:
    """What a report of one log says of it without its network path: NCCL version, hosts, and the counts of
    nodes, ranks, NICs and stored WARN lines (the lengths of those lists in ``log.path()``)."""
    nodes = log.nodes()
    return {"version": log.version, "hosts": nodes,
            "counts": {"nodes": len(nodes), "ranks": len(log.ranks), "nics": len(log.nics),
                       "warnings": len(log.warnings)}}


@dataclass
class _Identity:
    version: str | None = None
    comms: set[str] = field(default_factory=set)                      # real commIds
    world: int | None = None
    rank_of: dict[tuple[str, tuple[str, int]], int] = field(default_factory=dict)   # (comm, process) -> rank
    proc_of: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)   # (comm, rank) -> process


def _identity(t: Tables) -> _Identity:
    meta = {r["key"]: r["value"] for r in t["meta"]}
    ident = _Identity(version=meta.get("nccl_version") or None)
    claims: list[tuple[str, int | None, str | None, int | None]] = []
    for r in t["nccl_ranks"]:
        comm = str(r["comm_id"] or "")
        if comm and not comm.startswith("nranks="):
            ident.comms.add(comm)
        if isinstance(r["nranks"], int):
            ident.world = max(ident.world or 0, r["nranks"])
        claims.append((comm if not comm.startswith("nranks=") else "world", r["rank"], r["host"], r["pid"]))
    claims += [("nccl-tests", d["rank"], d["host"], d["pid"]) for d in t["nccl_devices"]]
    claims += [("launcher", v["label"], v["host"], v["pid"]) for v in t["nccl_labels"]]
    for comm, rank, host, pid in claims:
        if rank is not None and host is not None and pid is not None:
            ident.proc_of.setdefault((comm, rank), (host, pid))
            ident.rank_of.setdefault((comm, (host, pid)), rank)
    return ident


def _conflict(job: _Identity, new: _Identity) -> str | None:
    """Why ``new``'s file is not of the job (None: nothing says so)."""
    if job.version and new.version and job.version != new.version:
        return f"NCCL {new.version}, the job's is {job.version}"
    if job.comms and new.comms and not job.comms & new.comms:
        return (f"no communicator in common (commId {', '.join(sorted(new.comms)[:2])}; the job's "
                f"{', '.join(sorted(job.comms)[:2])})")
    if job.world and new.world and job.world != new.world:
        return f"a world of {new.world} ranks, the job's has {job.world}"
    for (comm, rank), proc in new.proc_of.items():
        other = job.proc_of.get((comm, rank))
        if other is not None and other != proc:
            return f"rank {rank} is {proc[0]}:{proc[1]} there, {other[0]}:{other[1]} in the job"
    for (comm, proc), rank in new.rank_of.items():
        other_rank = job.rank_of.get((comm, proc))
        if other_rank is not None and other_rank != rank:
            return f"process {proc[0]}:{proc[1]} is rank {rank} there, rank {other_rank} in the job"
    return None


def _tie(job: _Identity, new: _Identity) -> str:
    """What ties a file to the job it joins."""
    shared = sorted(job.comms & new.comms)
    if shared:
        return f"commId {shared[0]}"
    same = [k for k in new.proc_of if k in job.proc_of]
    if same:
        return "the same processes"
    if job.world and new.world:
        return f"a world of {new.world} ranks"
    return "nothing contradicts it"


def _absorb(job: _Identity, new: _Identity) -> None:
    job.version = job.version or new.version
    job.comms |= new.comms
    job.world = job.world or new.world
    for k, v in new.proc_of.items():
        job.proc_of.setdefault(k, v)
    for k2, v2 in new.rank_of.items():
        job.rank_of.setdefault(k2, v2)


def _key(row: Row, cols: tuple[str, ...]) -> tuple[Cell, ...]:
    return tuple(row.get(c) for c in cols)


def merge_tables(parts: Sequence[tuple[str, RawTables]]) -> tuple[Tables, tuple[Source, ...]]:
    """Several files' tables as one log's (line numbers run on; see the module's docstring)."""
    out: RawTables = {name: [] for name in parts[0][1]}
    index: dict[str, dict[tuple[Cell, ...], Row]] = {name: {} for name in out}
    sources: list[Source] = []
    offset = 0
    duplicate_warnings: dict[str, int] = {}
    dropped: dict[str, int] = {}
    kept: dict[str, int] = {}   # rows kept per capped table (WARN lines: per kind)
    first_file: dict[str, dict[tuple[Cell, ...], int]] = {name: {} for name in _ONCE_ACROSS_FILES}
    for n, (label, t) in enumerate(parts):
        meta = {r["key"]: r["value"] for r in typed(t)["meta"]}
        lines = int(meta.get("lines") or 0) if str(meta.get("lines") or "").isdigit() else 0
        sources.append(Source(label, offset, lines))
        for name, rows in t.items():
            for row in rows:
                row = dict(row)
                if isinstance(line := row.get("line"), int):
                    row["line"] = line + offset
                if name == "nccl_tests_rows" and isinstance(tbl := row.get("tbl"), int):
                    row["tbl"] = tbl + n * 1_000_000
                _add(name, row, n, out, index, first_file, duplicate_warnings, dropped, kept)
        offset += lines
    merged = typed(out)
    if all(_procs_complete(typed(t)) for _, t in parts):  # every WARN line's process known: each process once
        totals: dict[str, int] = {}
        for proc in merged["nccl_warning_procs"]:
            totals[proc["kind"]] = totals.get(proc["kind"], 0) + int(proc["count"] or 0)
        merged["nccl_warning_counts"] = [{"kind": k, "count": v} for k, v in sorted(totals.items())]
    else:  # stores written before the per-process counts: the lines two files both kept count once
        for kind, twice in duplicate_warnings.items():
            for wc in merged["nccl_warning_counts"]:
                if wc["kind"] == kind and isinstance(wc["count"], int):
                    wc["count"] = max(0, wc["count"] - twice)
    if dropped.get("nccl_connections"):
        counter = next((r for r in merged["nccl_counters"] if r["name"] == "connections_dropped"), None)
        if counter is None:
            merged["nccl_counters"].append({"name": "connections_dropped", "value": dropped["nccl_connections"]})
        else:
            counter["value"] = int(counter["value"] or 0) + dropped["nccl_connections"]
    merged["meta"] = _meta([typed(t) for _, t in parts], offset)
    return merged, tuple(sources)


def _procs_complete(t: Tables) -> bool:
    """The file's per-process WARN counts add up to its per-kind counts (none was capped or missing)."""
    by_kind: dict[str, int] = {}
    for row in t.get("nccl_warning_procs") or []:
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + int(row["count"] or 0)
    return by_kind == {r["kind"]: int(r["count"] or 0) for r in t["nccl_warning_counts"] if r["count"]}


def _add(name: str, row: Row, file_no: int, out: RawTables,
         index: dict[str, dict[tuple[Cell, ...], Row]], first_file: dict[str, dict[tuple[Cell, ...], int]],
         duplicate_warnings: dict[str, int],
         dropped: dict[str, int], kept: dict[str, int]) -> None:
    if name == "meta":
        return
    if name in _KEYED:
        cols, summed = _KEYED[name]
        k = _key(row, cols)
        have = index[name].get(k)
        if have is None:
            if len(out[name]) >= _KEYED_CAPS.get(name, MAX_SMALL):
                dropped[name] = dropped.get(name, 0) + 1
                return
            index[name][k] = row
            out[name].append(row)
            return
        for c in summed:
            add, prior = row.get(c), have.get(c)
            if isinstance(add, int) and isinstance(prior, int):
                have[c] = prior + add
        if name == "nccl_env" and row.get("value") != have.get("value"):
            have["distinct_values"] = _count(have.get("distinct_values"), 1) + 1
        return
    if name in _ONCE_ACROSS_FILES:
        k = _key(row, _ONCE_ACROSS_FILES[name])
        if first_file[name].setdefault(k, file_no) != file_no:  # another file holds this line of the same process
            if name == "nccl_warnings":
                kind = str(row["kind"])
                duplicate_warnings[kind] = duplicate_warnings.get(kind, 0) + 1
            return
        cap = _CAPS.get(name, _KEYED_CAPS.get(name))
        bucket = f"{name}:{row['kind']}" if name == "nccl_warnings" else name
        if cap is not None and kept.get(bucket, 0) >= cap:
            dropped[name] = dropped.get(name, 0) + 1
            return
        kept[bucket] = kept.get(bucket, 0) + 1
        out[name].append(row)
        return
    if name == "nccl_warning_procs":  # a process's WARN count: the most any file holds (unknown printers add up)
        k = _key(row, ("kind", "host", "pid", "label"))
        have = index[name].get(k)
        if have is None:
            if len(out[name]) < MAX_RANKS:
                index[name][k] = row
                out[name].append(row)
        elif k[1:] == (None, None, None):
            have["count"] = _count(have["count"]) + _count(row["count"])
        else:
            have["count"] = max(_count(have["count"]), _count(row["count"]))
        return
    if name == "nccl_rings":  # per channel the widest ring (as within one file)
        have = index[name].get((row["channel"],))
        if have is None and len(out[name]) >= MAX_SMALL:
            return
        if have is None or len(str(row["ranks"] or "").split()) > len(str(have["ranks"] or "").split()):
            if have is not None:
                out[name].remove(have)
            index[name][(row["channel"],)] = row
            out[name].append(row)
        return
    if name == "nccl_channel_counts" or name == "nccl_nvls":
        have = index[name].get((row["name"],))
        if have is None:
            index[name][(row["name"],)] = row
            out[name].append(row)
        elif isinstance(value := row["value"], int) and value > _count(have["value"]):
            have["value"] = value
        return
    if name == "nccl_topo_links":
        have = index[name].get((row["kind"],))
        if have is None:
            index[name][(row["kind"],)] = row
            out[name].append(row)
            return
        have["count"] = _count(have["count"]) + _count(row["count"])
        bw, best = row["max_bw"], have["max_bw"]
        if isinstance(bw, int | float) and (not isinstance(best, int | float) or bw > best):
            have["max_bw"] = bw
        have["targets"] = " ".join(sorted(set(str(have["targets"] or "").split()) | set(str(row["targets"] or "").split())))
        return
    if name == "nccl_graphs" and len(out[name]) >= 1000:
        return
    out[name].append(row)  # graphs: one per rank's search, all kept (as within one file)


def _count(value: Cell, empty: int = 0) -> int:
    """A BIGINT count as read (``empty`` where NULL or 0)."""
    return int(value) if isinstance(value, int | float) and value else empty


def _meta(parts: Sequence[Tables], lines: int) -> list[StoredMeta]:
    metas = [{r["key"]: r["value"] for r in t["meta"]} for t in parts]
    meta = dict(metas[0])
    for m in metas[1:]:
        for k, v in m.items():
            if v and not meta.get(k):
                meta[k] = v
    tests = next((m for m in metas if m.get("tests_name") or m.get("tests_avg_busbw")), None)
    if tests is not None:
        for k in ("tests_name", "tests_version", "tests_layout", "tests_avg_busbw", "tests_out_of_bounds"):
            meta[k] = tests.get(k) or ""
    offsets = 0
    for m in metas:
        if m is tests and str(m.get("tests_avg_line") or "").isdigit():
            meta["tests_avg_line"] = str(int(m["tests_avg_line"]) + offsets)
        offsets += int(m["lines"]) if str(m.get("lines") or "").isdigit() else 0
    meta["hosts_seen"] = " ".join(sorted({h for m in metas for h in str(m.get("hosts_seen") or "").split()})[:4096])
    meta["lines"] = str(lines)
    meta["nccl_lines"] = str(sum(int(m["nccl_lines"]) for m in metas if str(m.get("nccl_lines") or "").isdigit()))
    return [{"key": k, "value": v} for k, v in sorted(meta.items())]


def load_job(files: Sequence[tuple[Path, str]]) -> Job:
    """The ingested logs ``files`` (DuckDB path, label), in order: the first file's job merged into one log, and
    each file's own ``summary``. Each store is read once (``store.read_many``). Raises ``TraceError`` as
    ``load`` does for a file that is not an ingested NCCL log."""
    if not files:
        raise ValueError("no NCCL log")
    parts: list[tuple[str, RawTables]] = []
    left: list[LeftOut] = []
    ties: list[str] = []
    digests: dict[str, str] = {}
    job: _Identity | None = None
    members: list[int] = []
    summaries: list[LogSummary] = []
    for i, ((_path, label), raw) in enumerate(zip(files, read_many(Path(p) for p, _ in files), strict=True)):
        t = typed(raw)
        own = build(t)
        summaries.append(summary(own))
        digest = _content_digest(t)
        if digest is not None and digest in digests:
            left.append(LeftOut(i, label, f"the same content as {digests[digest]}"))
            continue
        ident = _identity(t)
        if job is None:
            job = ident
            first = own
        else:
            why = _conflict(job, ident)
            if why is not None:
                left.append(LeftOut(i, label, f"another job: {why}"))
                continue
            ties.append(_tie(job, ident))
            _absorb(job, ident)
        if digest is not None:
            digests[digest] = label
        parts.append((label, raw))
        members.append(i)
    if len(parts) == 1:
        return Job(first, (parts[0][0],), tuple(members), tuple(left), (), tuple(summaries))
    tables, sources = merge_tables(parts)
    return Job(build(tables, sources), tuple(label for label, _ in parts), tuple(members), tuple(left),
               tuple(ties), tuple(summaries))


def _content_digest(t: Tables) -> str | None:
    """The digest of the log's bytes the ingest recorded (None: ingested before it did)."""
    return {r["key"]: r["value"] for r in t["meta"]}.get("content_digest") or None


__all__ = ["Job", "LeftOut", "load_job", "merge_tables", "summary"]
