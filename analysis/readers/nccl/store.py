"""Read an ingested NCCL log back from its DuckDB file into ``NcclLog`` (``load``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import duckdb

from analysis.duck import connect
from analysis.errors import TraceError
from analysis.readers.nccl.model import (
    AlgoCall,
    Connection,
    EnvVar,
    Failure,
    Gdr,
    Graph,
    NcclLog,
    NcclNic,
    NetNote,
    Rank,
    Ring,
    Source,
    TestsRow,
    Tree,
    Tuning,
    Warn,
    nccl_tests,
)
from analysis.readers.nccl.schema import (
    NCCL_TABLES,
    OPTIONAL_TABLES,
    ROWS_COPY_TABLE,
    Cell,
    RawTables,
    StoredDevice,
    StoredRank,
    Tables,
)


def nic_kind(net: str | None, link: str | None, provider: str | None = None) -> str:
    low = (link or "").lower()
    if net == "Socket":
        return "socket"
    if low == "ib":
        return "IB"
    if low == "roce":
        return "RoCE"
    if provider:
        return {"efa": "EFA", "cxi": "CXI"}.get(provider.lower(), provider)
    return link or "other"


def _clean(value: Any) -> Cell:
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return cast(Cell, value.item())  # a numpy scalar
    return cast(Cell, value)


def select_rows(con: Any, table: str) -> list[dict[str, Cell]]:
    """A table's rows as dicts (no rows for an optional table the store lacks)."""
    cols = [c for c, _ in NCCL_TABLES[table]]
    if table in OPTIONAL_TABLES and not con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]).fetchone()[0]:
        return []
    rows = con.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()  # noqa: S608 - fixed names
    return [{c: _clean(v) for c, v in zip(cols, row, strict=True)} for row in rows]


def _ints(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in (text or "").split() if x.lstrip("-").isdigit())


def _rows_copy(con: Any, catalog: str = "") -> RawTables | None:
    """The store's copy of its rows in one value (``schema.ROWS_COPY_TABLE``; ``catalog``: the attached store's
    name and a dot), None where it has none (a large log, a store written before the copy) or the copy is not
    of the tables' shape."""
    try:
        found = con.execute(f"SELECT rows FROM {catalog}{ROWS_COPY_TABLE}").fetchall()  # noqa: S608 - fixed names
    except duckdb.CatalogException:
        return None
    if len(found) != 1 or not isinstance(found[0][0], str):
        return None
    try:
        copy = json.loads(found[0][0])
    except ValueError:
        return None
    if not isinstance(copy, dict):
        return None
    tables: RawTables = {}
    for name, cols in NCCL_TABLES.items():
        rows = copy.get(name)
        if not isinstance(rows, list) or any(not isinstance(r, list) or len(r) != len(cols) for r in rows):
            return None
        names = [c for c, _ in cols]
        tables[name] = [dict(zip(names, r, strict=True)) for r in rows]
    return tables


def _read(con: Any, catalog: str = "") -> RawTables:
    """The open store's tables: its rows' copy where it has one, else table by table (an attached store:
    ``catalog`` is its name and a dot, and the tables are read with it as the default catalog)."""
    try:
        t = _rows_copy(con, catalog)
        if t is None:
            if catalog:
                con.execute(f"USE {catalog.rstrip('.')}")
            try:
                t = {name: select_rows(con, name) for name in NCCL_TABLES}
            finally:
                if catalog:
                    con.execute("USE memory")
    except Exception as exc:
        raise TraceError("unsupported_schema", f"not an NCCL log store: {exc}") from None
    if {r["key"]: r["value"] for r in t["meta"]}.get("tool") != "nccl":
        raise TraceError("unsupported_schema", "this DuckDB file does not hold an NCCL log")
    return t


def read_tables(path: Path) -> RawTables:
    """An ingested NCCL log's tables as rows (read-only); raises ``TraceError`` for a file that is not one."""
    try:
        con = connect(Path(path), read_only=True)
    except Exception as exc:  # a file DuckDB cannot open
        raise TraceError("corrupt", f"cannot open the NCCL log's store: {exc}") from None
    try:
        return _read(con)
    finally:
        con.close()


def read_many(paths: Iterable[Path]) -> Iterator[RawTables]:
    """``read_tables`` of each path in turn, through one in-memory connection that attaches each store read-only
    (opening a connection per file costs about four times as much). Raises ``TraceError`` at the first file that
    is not an ingested NCCL log, as ``read_tables`` does."""
    con = connect(None, threads=1)
    try:
        for path in paths:
            literal = str(Path(path)).replace("'", "''")
            try:
                con.execute(f"ATTACH '{literal}' AS nccl_store (READ_ONLY)")
            except Exception as exc:  # a file DuckDB cannot open
                raise TraceError("corrupt", f"cannot open the NCCL log's store: {exc}") from None
            try:
                tables = _read(con, "nccl_store.")
            finally:
                con.execute("DETACH nccl_store")
            yield tables
    finally:
        con.close()


def load(path: Path) -> NcclLog:
    """Read an ingested NCCL log back from its DuckDB file (read-only)."""
    return build(typed(read_tables(path)))


def typed(t: RawTables) -> Tables:
    """A store's rows (``read_tables``, or several merged) as their tables' types: each column holds its declared
    type (the DDL casts every value on insert; the rows' copy is written only where every value has it)."""
    return cast(Tables, t)


def build(t: Tables, sources: tuple[Source, ...] = ()) -> NcclLog:
    """An ``NcclLog`` from its tables' rows (one log's, or several logs' merged: ``analysis.readers.nccl.merge``,
    whose ``sources`` say which file each line number is in)."""
    meta = {r["key"]: r["value"] for r in t["meta"]}
    devices: dict[int, StoredDevice] = {d["rank"]: d for d in t["nccl_devices"] if d["rank"] is not None}
    main_comm = _main_comm(t["nccl_ranks"])
    ranks: dict[int, Rank] = {}
    for r in sorted(t["nccl_ranks"], key=lambda r: (r["comm_id"] != main_comm, r["rank"])):
        if r["comm_id"] != main_comm or r["rank"] in ranks:
            continue
        dev = devices.get(r["rank"])
        ranks[r["rank"]] = Rank(r["rank"], r["host"] or (dev["host"] if dev else None),
                                r["pid"] or (dev["pid"] if dev else None), r["cuda_dev"], r["bus_id"],
                                dev["gpu"] if dev else None, r["label"], r["nranks"], r["comm_id"])
    for rank, d in sorted(devices.items()):
        if rank not in ranks:
            ranks[rank] = Rank(rank, d["host"], d["pid"], d["device"], d["bus"], d["gpu"], None, None, None)
    # srun/mpirun task labels: one task per rank, so the label is the rank (used for ranks no init line names).
    for v in sorted(t["nccl_labels"], key=lambda v: v["label"]):
        if v["label"] not in ranks:
            ranks[v["label"]] = Rank(v["label"], v["host"], v["pid"], None, None, None, v["label"], None, None)
    providers = {n["host"]: n["what"] for n in t["nccl_net_notes"] if n["kind"] == "provider"}
    any_provider = next(iter(providers.values()), None)
    kinds_by_name = {(n["host"], n["name"]): nic_kind(n["net"], n["link"]) for n in t["nccl_nics"] if n["link"]}
    nic_list = []
    for n in t["nccl_nics"]:
        kind = nic_kind(n["net"], n["link"], providers.get(n["host"], any_provider))
        if n["virtual"] and "+" in (n["name"] or ""):  # a merged device: the kind of its members
            members = {kinds_by_name.get((n["host"], m)) or "" for m in n["name"].split("+")}
            kind = members.pop() if len(members) == 1 and "" not in members else kind
        nic_list.append(NcclNic(n["host"], n["net"], n["idx"], n["name"], n["port"], n["link"], kind, n["speed_mbps"],
                            bool(n["virtual"]), n["line"]))
    # A net plugin (aws-ofi-nccl) lists no NICs: the devices its connections name stand for them.
    listed = {(n.host, n.index) for n in nic_list}
    for c in sorted(t["nccl_connections"], key=lambda c: c["line"]):
        if c["kind"] != "NET" or c["nic"] is None or c["net"] in ("IB", "Socket") or c["host"] is None:
            continue
        if (c["host"], c["nic"]) not in listed:
            listed.add((c["host"], c["nic"]))
            provider = providers.get(c["host"], any_provider)
            nic_list.append(NcclNic(c["host"], c["net"], c["nic"], f"{provider or c['net']} device {c['nic']}", None,
                                None, nic_kind(c["net"], None, provider), None, False, None))
    nics = tuple(sorted(nic_list, key=lambda n: (n.host or "", n.net, n.index)))
    conns = tuple(Connection(c["channel"], c["conn"], c["src"], c["dst"], c["direction"], c["host"], c["transport"],
                             c["kind"], c["net"], c["nic"], c["proxy_rank"], bool(c["gdr"]), bool(c["shared"]),
                             c["mode"], bool(c["read"]), c["line"], c["text"])
                  for c in sorted(t["nccl_connections"], key=lambda c: c["line"]))
    log = NcclLog(
        version=meta.get("nccl_version") or None,
        version_raw=meta.get("nccl_version_raw") or None,
        ranks=tuple(ranks[k] for k in sorted(ranks)),
        nics=nics,
        networks={r["name"]: r["lines"] for r in t["nccl_networks"]},
        oob={r["host"]: r["interface"] for r in t["nccl_oob"]},
        net_notes=tuple(NetNote(**n) for n in t["nccl_net_notes"]),
        gdr=tuple(Gdr(g["host"], g["scope"], g["gpu"], g["hca"], g["hca_name"], bool(g["enabled"]), g["distance"],
                      g["level"], g["op"], g["reason"], g["line"], g["text"]) for g in sorted(t["nccl_gdr"], key=lambda g: g["line"])),
        connections=conns,
        rings=tuple(Ring(r["channel"], _ints(r["ranks"]), r["line"]) for r in t["nccl_rings"]),
        trees=tuple(Tree(r["channel"], r["rank"], r["up"], _ints(r["down"]), r["line"])
                    for r in sorted(t["nccl_trees"], key=lambda r: (r["channel"], r["rank"]))),
        channel_counts={r["name"]: r["value"] for r in t["nccl_channel_counts"]},
        env=tuple(EnvVar(e["name"], e["value"], e["set_by"], e["count"], e["distinct_values"], e["line"])
                  for e in sorted(t["nccl_env"], key=lambda e: e["name"])),
        warnings=(),
        warning_counts={r["kind"]: r["count"] for r in t["nccl_warning_counts"]},
        failures=tuple(Failure(f["line"], f["label"], f["kind"], f["text"]) for f in t["nccl_failures"]),
        algo_calls=tuple(AlgoCall(a["coll"], a["bytes"], a["algo"], a["proto"], a["channels"], a["calls"], a["line"])
                         for a in sorted(t["nccl_algo_calls"], key=lambda a: a["line"])),
        tuning=tuple(Tuning(x["coll"], x["algo"], x["proto"], x["latency_us"], x["bw_gbs"], x["line"])
                     for x in sorted(t["nccl_tuning"], key=lambda x: x["line"])),
        graphs=tuple(Graph(g["pattern"], g["cross_nic"], g["nchannels"], g["bw_intra"], g["bw_inter"], g["type"],
                           g["line"]) for g in t["nccl_graphs"]),
        topo_links={r["kind"]: {"count": r["count"], "max_bw": r["max_bw"], "targets": r["targets"]}
                    for r in t["nccl_topo_links"]},
        p2p_refused=tuple((r["host"], r["dev_a"], r["dev_b"], r["count"]) for r in t["nccl_p2p_refused"]),
        nvls={r["name"]: r["value"] for r in t["nccl_nvls"]},
        tests=nccl_tests(
            meta.get("tests_name") or None, meta.get("tests_version") or None, meta.get("tests_layout") or None,
            float(meta["tests_avg_busbw"]) if meta.get("tests_avg_busbw") else None,
            int(meta["tests_avg_line"]) if meta.get("tests_avg_line") else None,
            meta.get("tests_out_of_bounds") or None,
            tuple(TestsRow(r["tbl"], r["line"], r["size"], r["count"], r["type"], r["redop"], r["root"],
                           r["oop_time_us"], r["oop_algbw"], r["oop_busbw"], r["oop_wrong"], r["ip_time_us"],
                           r["ip_algbw"], r["ip_busbw"], r["ip_wrong"])
                  for r in sorted(t["nccl_tests_rows"], key=lambda r: r["line"]))),
        counters={r["name"]: r["value"] for r in t["nccl_counters"]},
        meta=meta,
        sources=sources,
    )
    warns = tuple(Warn(w["line"], w["kind"], w["message"], w["host"], w["pid"], w["dev"], w["label"], w["source"],
                       log.rank_of(w["host"], w["pid"], w["dev"], w["label"]))
                  for w in sorted(t["nccl_warnings"], key=lambda w: w["line"]))
    object.__setattr__(log, "warnings", warns)
    return log


def _main_comm(rows: list[StoredRank]) -> str | None:
    """The communicator that spans the most ranks (the world one), first seen on ties."""
    best: tuple[int, bool, int, str] | None = None
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for r in rows:
        counts[r["comm_id"]] = counts.get(r["comm_id"], 0) + 1
        first.setdefault(r["comm_id"], r["line"] or 0)
    for comm, n in counts.items():
        nranks = max((r["nranks"] or 0) for r in rows if r["comm_id"] == comm)
        key = (max(nranks, n), not comm.startswith("nranks="), -first[comm], comm)
        if best is None or key > best:
            best = key
    return best[3] if best else None
