"""Ingest one NCCL debug log into its DuckDB file: sniff, parse in one bounded pass, publish atomically."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from analysis import fmt
from analysis.duck import publishing
from analysis.errors import TraceError
from analysis.limits import Progress
from analysis.readers.nccl.lines import normalize_version, read_blocks
from analysis.readers.nccl.parse import LogParser, Parsed
from analysis.readers.nccl.schema import (
    NCCL_SCHEMA_VERSION,
    NCCL_TABLES,
    ROWS_COPY_MAX_ROWS,
    ROWS_COPY_TABLE,
    ddl,
)

logger = logging.getLogger(__name__)

MAX_LOG_BYTES = 2 * 1024**3       # the largest log read (a clear ``too_large`` beyond)
SNIFF_BYTES = 64 * 1024
_MARKERS = (b"NCCL INFO", b"NCCL WARN", b"# nThread ", b"#  Rank ", b"NCCL version ")


def looks_like_nccl_log(head: bytes) -> bool:
    """True when the first bytes of a file (up to 64 KiB are looked at) read as an NCCL debug log or
    nccl-tests output: text, with ``NCCL INFO``/``NCCL WARN`` lines or nccl-tests' header, behind any
    ``host:pid:tid [dev]``, srun ``N:`` or mpirun ``[1,r]<stdout>:`` prefixes."""
    head = head[:SNIFF_BYTES]
    if not head:
        return False
    if head.startswith((b"SQLite format 3", b"PK\x03\x04", b"\x1f\x8b", b"NVR\x00")):
        return False
    # Text at the start (a crashed node's log may hold NUL-filled blocks further on: they are read as text).
    text_bytes = sum(1 for b in head[:4096] if b >= 32 or b in (9, 10, 13))
    if text_bytes < 0.95 * min(len(head), 4096):
        return False
    return any(m in head for m in _MARKERS)


def parse_file(src: Path, *, progress: Progress | None = None, timeout_s: float = 3600.0,
               max_bytes: int = MAX_LOG_BYTES) -> Parsed:
    """One pass over the log: the parsed, bounded tables. Raises ``TraceError``."""
    src = Path(src)
    size = src.stat().st_size
    if size == 0:
        raise TraceError("empty_file", "the log is empty")
    if size > max_bytes:
        raise TraceError("too_large", f"the log is {size} bytes; the limit for an NCCL log is {max_bytes}")
    with src.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
        if not looks_like_nccl_log(head):
            raise TraceError("not_nccl_log", "no NCCL INFO/WARN lines or nccl-tests header in the first 64 KiB; "
                             "run the job with NCCL_DEBUG=INFO and upload its output")
        fh.seek(0)
        parser = LogParser()
        counters: dict[str, int] = {}
        deadline = time.monotonic() + timeout_s
        feed = parser.feed
        digest = hashlib.blake2b(digest_size=16)
        for block in read_blocks(fh, counters, digest):
            for line in block:
                feed(line)
            if time.monotonic() > deadline:
                raise TraceError("timeout", f"reading the log took longer than {fmt.exact(timeout_s)} s")
            if progress:
                progress("nccl_log", fh.tell(), size)
    parsed = parser.r
    parsed.digest = digest.hexdigest()  # several logs of one job: the same file uploaded twice counts once
    parsed.tests.finish()
    parsed.counters.update(counters)
    parsed.counters["bytes"] = size
    parsed.counters["ofi_set"] = len(parser._ofi_set)
    for name in parser._ofi_set:
        if name in parsed.env:
            parsed.env[name]["set_by"] = "net plugin"
        else:
            parsed.env[name] = {"name": name, "value": None, "line": None, "count": 0, "values": {},
                                "set_by": "net plugin"}
    if parsed.nccl_lines == 0 and not parsed.tests.rows and not parsed.tests.devices:
        raise TraceError("not_nccl_log", "the file has no NCCL INFO/WARN lines and no nccl-tests table")
    if progress:
        progress("nccl_log", size, size)
    return parsed


def _literal(value: object) -> str:
    """A SQL literal for one cell (the column's type casts it on insert). Strings are quoted, so a log's text can
    never change the statement; a NUL byte, which a quoted literal cannot hold, is spliced in with ``chr(0)``."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"'{value!r}'::DOUBLE"
    text = str(value).replace("'", "''")
    if "\x00" in text:
        return "(" + " || chr(0) || ".join(f"'{part}'" for part in text.split("\x00")) + ")"
    return f"'{text}'"


def _insert(con: Any, table: str, rows: list[tuple], batch: int = 2000) -> None:
    """Rows into ``table`` as literal VALUES lists: binding parameters or scanning a data frame would import
    pandas, which the service does not install (and which costs 0.5 s to import)."""
    for at in range(0, len(rows), batch):
        values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows[at:at + batch])
        con.execute(f"INSERT INTO {table} VALUES {values}")  # noqa: S608 - fixed table names, quoted literals


def _rows(parsed: Parsed, parser_hosts: set[str]) -> dict[str, list[tuple]]:
    t = parsed.tests
    ints = lambda d: " ".join(str(x) for x in d)  # noqa: E731
    env_rows = []
    for e in parsed.env.values():
        env_rows.append((e["name"], e["value"], len(e.get("values", {})), e["count"], e.get("set_by", "environment"),
                         e["line"]))
    version = None
    if parsed.versions:
        version = max(parsed.versions.items(), key=lambda kv: kv[1])[0]
    meta = {"tool": "nccl", "schema_version": str(NCCL_SCHEMA_VERSION), "nccl_version": version or "",
            "nccl_version_raw": parsed.version_raw or "", "tests_name": t.name or "", "tests_version": t.version or "",
            "tests_layout": t.layout or "", "tests_avg_busbw": "" if t.avg_busbw is None else repr(t.avg_busbw),
            "tests_avg_line": "" if t.avg_line is None else str(t.avg_line),
            "tests_out_of_bounds": t.out_of_bounds or "", "lines": str(parsed.lines),
            "nccl_lines": str(parsed.nccl_lines), "content_digest": parsed.digest}
    meta["hosts_seen"] = " ".join(sorted(h for h in parser_hosts if " " not in h)[:4096])
    hosts = sorted({r["host"] for r in parsed.ranks.values() if r["host"]})
    if hosts:
        meta["host"] = hosts[0]
    return {
        "nccl_ranks": [(r["comm_id"], r["rank"], r["nranks"], r["host"], r["pid"], r["cuda_dev"], r["nvml_dev"],
                        r["bus_id"], r["label"], r["complete"], r["line"]) for r in parsed.ranks.values()],
        "nccl_labels": [(v["label"], v["host"], v["pid"], v["dev"], v["line"]) for v in parsed.labels.values()],
        "nccl_devices": [(d.get("rank"), d.get("pid"), d.get("host"), d.get("device"), d.get("bus"), d.get("gpu"),
                          d["line"]) for d in t.devices],
        "nccl_nics": [(n["host"], n["net"], n["index"], n["name"], n["port"], n["link"], n["speed_mbps"],
                       n["virtual"], n["line"]) for n in parsed.nics.values()],
        "nccl_net_notes": [(n["kind"], n["what"], n["host"], n["count"], n["repeats"], n["text"], n["line"])
                           for n in parsed.net_notes],
        "nccl_networks": sorted(parsed.networks.items()),
        "nccl_oob": sorted(parsed.oob.items()),
        "nccl_gdr": [(g["host"], g["scope"], g["gpu"], g["hca"], g["hca_name"], g["enabled"], g["distance"],
                      g["level"], g["op"], g["reason"], g["read"], g["rank_dev"], g["repeats"], g["line"], g["text"])
                     for g in parsed.gdr],
        "nccl_connections": [(c["channel"], c["conn"], c["src"], c["dst"], c["src_tag"], c["dst_tag"], c["direction"],
                              c["host"], c["pid"], c["dev"], c["label"], c["transport"], c["kind"], c["net"],
                              c["nic"], c["proxy_rank"], c["gdr"], c["shared"], c["mode"], c["read"], c["line"],
                              c["text"])
                             for c in parsed.connections.values()],
        "nccl_rings": [(r["channel"], ints(r["ranks"]), r["line"]) for r in sorted(parsed.rings.values(),
                                                                                   key=lambda r: r["channel"])],
        "nccl_trees": [(r["channel"], r["rank"], r["up"], ints(r["down"]), r["line"]) for r in parsed.trees.values()],
        "nccl_channel_counts": sorted(parsed.channel_counts.items()),
        "nccl_env": env_rows,
        "nccl_warnings": [(w["line"], w["kind"], w["message"], w["host"], w["pid"], w["tid"], w["dev"], w["label"],
                           w["source"]) for w in parsed.warnings],
        "nccl_warning_counts": sorted(parsed.warning_counts.items()),
        "nccl_warning_procs": [(*k, v) for k, v in parsed.warning_procs.items()],
        "nccl_failures": [(f["line"], f["label"], f["kind"], f["text"]) for f in parsed.failures],
        "nccl_algo_calls": [(a["coll"], a["bytes"], a["algo"], a["proto"], a["channels"], a["calls"], a["line"])
                            for a in parsed.algo_calls.values()],
        "nccl_tuning": [(x["coll"], x["algo"], x["proto"], x["latency_us"], x["bw_gbs"], x["line"])
                        for x in parsed.tuning.values()],
        "nccl_graphs": [(g.get("pattern"), g.get("cross_nic"), g.get("nchannels"), g.get("bw_intra"),
                         g.get("bw_inter"), g.get("type"), g["line"]) for g in parsed.graphs],
        "nccl_topo_links": [(k["kind"], k["count"], k["max_bw"], " ".join(sorted(k["targets"])))
                            for k in parsed.topo_links.values()],
        "nccl_p2p_refused": [(*k, v) for k, v in parsed.p2p_refused.items()],
        "nccl_nvls": sorted((k, int(v)) for k, v in parsed.nvls.items() if k != "line"),
        "nccl_tests_rows": [(r.table, r.line, r.size, r.count, r.type, r.redop, r.root, r.oop_time_us, r.oop_algbw,
                             r.oop_busbw, r.oop_wrong, r.ip_time_us, r.ip_algbw, r.ip_busbw, r.ip_wrong) for r in t.rows],
        "nccl_counters": sorted((k, int(v)) for k, v in {**parsed.counters, "tests_rows_dropped": t.dropped,
                                                         "lines": parsed.lines}.items()),
        "meta": sorted(meta.items()),
    }


def _rows_copy(tables: dict[str, list[tuple]]) -> str | None:
    """The rows as the tables will hold them, in one JSON value (``schema.ROWS_COPY_TABLE``), when every value
    already has its column's type, so that storing it changes nothing: a string in a VARCHAR column, an int in a
    BIGINT one, a bool in a BOOLEAN one, a number in a DOUBLE one (a non-finite one is read back as None, as
    ``store`` reads the table). None (no copy; the store is read table by table) for any other value."""
    copy: dict[str, list[list[Any]]] = {}
    for name, cols in NCCL_TABLES.items():
        out = copy[name] = []
        for row in tables.get(name, ()):
            cells: list[Any] = []
            for value, (_col, kind) in zip(row, cols, strict=True):
                if value is None:
                    cells.append(None)
                elif kind == "DOUBLE" and type(value) in (int, float):
                    cells.append(float(value) if math.isfinite(value) else None)
                elif type(value) is {"VARCHAR": str, "BIGINT": int, "BOOLEAN": bool}.get(kind):
                    cells.append(value)
                else:
                    return None
            out.append(cells)
    return json.dumps(copy, separators=(",", ":"), allow_nan=False)


def ingest(src: Path, out: Path, *, progress: Progress | None = None, limits: Any = None) -> None:
    """Parse the NCCL log ``src`` and write its normalized DuckDB file to ``out`` (temporary name, fsync,
    ``os.replace``); nothing is left at ``out`` on error. Raises ``TraceError`` (``empty_file``,
    ``not_nccl_log``, ``too_large``, ``timeout``)."""
    src, out = Path(src), Path(out)
    max_bytes = min(MAX_LOG_BYTES, int(getattr(limits, "max_bytes", MAX_LOG_BYTES)))
    parsed = parse_file(src, progress=progress, timeout_s=float(getattr(limits, "timeout_s", 3600.0)),
                        max_bytes=max_bytes)
    tables = _rows(parsed, parsed.hosts)
    out.parent.mkdir(parents=True, exist_ok=True)
    with publishing(out, threads=int(getattr(limits, "threads", 2))) as con:
        for stmt in ddl():
            con.execute(stmt)
        for table, rows in tables.items():
            if rows:
                _insert(con, table, rows)
        copy = _rows_copy(tables) if sum(len(rows) for rows in tables.values()) <= ROWS_COPY_MAX_ROWS else None
        if copy is not None:
            con.execute(f"CREATE TABLE {ROWS_COPY_TABLE} (rows VARCHAR)")
            _insert(con, ROWS_COPY_TABLE, [(copy,)])
    logger.info("ingested nccl log", extra={"lines": parsed.lines, "connections": len(parsed.connections)})


__all__ = ["MAX_LOG_BYTES", "ingest", "looks_like_nccl_log", "normalize_version", "parse_file"]
