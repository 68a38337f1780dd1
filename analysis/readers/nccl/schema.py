"""The DuckDB tables an NCCL log is normalized into: names, columns and types, in one place."""

from __future__ import annotations

from typing import TypedDict

NCCL_SCHEMA_VERSION = 1
# Every integer column is BIGINT: numbers read from the log are at most 18 digits (lines.int_or_none), any of
# them may be hostile, and none may overflow its column.

# table -> ((column, DuckDB type), ...). Lists of ranks are stored as space-separated text ("0 1 2 3").
NCCL_TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "nccl_ranks": (("comm_id", "VARCHAR"), ("rank", "BIGINT"), ("nranks", "BIGINT"), ("host", "VARCHAR"),
                   ("pid", "BIGINT"), ("cuda_dev", "BIGINT"), ("nvml_dev", "BIGINT"), ("bus_id", "VARCHAR"),
                   ("label", "BIGINT"), ("complete", "BOOLEAN"), ("line", "BIGINT")),
    "nccl_labels": (("label", "BIGINT"), ("host", "VARCHAR"), ("pid", "BIGINT"), ("dev", "BIGINT"),
                    ("line", "BIGINT")),
    "nccl_devices": (("rank", "BIGINT"), ("pid", "BIGINT"), ("host", "VARCHAR"), ("device", "BIGINT"),
                     ("bus", "VARCHAR"), ("gpu", "VARCHAR"), ("line", "BIGINT")),
    "nccl_nics": (("host", "VARCHAR"), ("net", "VARCHAR"), ("idx", "BIGINT"), ("name", "VARCHAR"),
                  ("port", "BIGINT"), ("link", "VARCHAR"), ("speed_mbps", "BIGINT"), ("virtual", "BOOLEAN"),
                  ("line", "BIGINT")),
    "nccl_net_notes": (("kind", "VARCHAR"), ("what", "VARCHAR"), ("host", "VARCHAR"), ("count", "BIGINT"),
                       ("repeats", "BIGINT"), ("text", "VARCHAR"), ("line", "BIGINT")),
    "nccl_networks": (("name", "VARCHAR"), ("lines", "BIGINT")),
    "nccl_oob": (("host", "VARCHAR"), ("interface", "VARCHAR")),
    "nccl_gdr": (("host", "VARCHAR"), ("scope", "VARCHAR"), ("gpu", "VARCHAR"), ("hca", "BIGINT"),
                 ("hca_name", "VARCHAR"), ("enabled", "BOOLEAN"), ("distance", "BIGINT"), ("level", "BIGINT"),
                 ("op", "VARCHAR"), ("reason", "VARCHAR"), ("read", "BIGINT"), ("dev", "BIGINT"),
                 ("repeats", "BIGINT"), ("line", "BIGINT"), ("text", "VARCHAR")),
    "nccl_connections": (("channel", "BIGINT"), ("conn", "BIGINT"), ("src", "BIGINT"), ("dst", "BIGINT"),
                         ("src_tag", "VARCHAR"), ("dst_tag", "VARCHAR"), ("direction", "VARCHAR"),
                         ("host", "VARCHAR"), ("pid", "BIGINT"), ("dev", "BIGINT"), ("label", "BIGINT"),
                         ("transport", "VARCHAR"), ("kind", "VARCHAR"), ("net", "VARCHAR"), ("nic", "BIGINT"),
                         ("proxy_rank", "BIGINT"), ("gdr", "BOOLEAN"), ("shared", "BOOLEAN"), ("mode", "VARCHAR"),
                         ("read", "BOOLEAN"), ("line", "BIGINT"), ("text", "VARCHAR")),
    "nccl_rings": (("channel", "BIGINT"), ("ranks", "VARCHAR"), ("line", "BIGINT")),
    "nccl_trees": (("channel", "BIGINT"), ("rank", "BIGINT"), ("up", "BIGINT"), ("down", "VARCHAR"),
                   ("line", "BIGINT")),
    "nccl_channel_counts": (("name", "VARCHAR"), ("value", "BIGINT")),
    "nccl_env": (("name", "VARCHAR"), ("value", "VARCHAR"), ("distinct_values", "BIGINT"), ("count", "BIGINT"),
                 ("set_by", "VARCHAR"), ("line", "BIGINT")),
    "nccl_warnings": (("line", "BIGINT"), ("kind", "VARCHAR"), ("message", "VARCHAR"), ("host", "VARCHAR"),
                      ("pid", "BIGINT"), ("tid", "BIGINT"), ("dev", "BIGINT"), ("label", "BIGINT"),
                      ("source", "VARCHAR")),
    "nccl_warning_counts": (("kind", "VARCHAR"), ("count", "BIGINT")),
    # WARN lines per kind and printing process (host, pid, launcher label): several logs of one job that hold the
    # same process's lines count them once (analysis.readers.nccl.merge). Absent from stores written before it.
    "nccl_warning_procs": (("kind", "VARCHAR"), ("host", "VARCHAR"), ("pid", "BIGINT"), ("label", "BIGINT"),
                           ("count", "BIGINT")),
    "nccl_failures": (("line", "BIGINT"), ("label", "BIGINT"), ("kind", "VARCHAR"), ("text", "VARCHAR")),
    "nccl_algo_calls": (("coll", "VARCHAR"), ("bytes", "BIGINT"), ("algo", "VARCHAR"), ("proto", "VARCHAR"),
                        ("channels", "BIGINT"), ("calls", "BIGINT"), ("line", "BIGINT")),
    "nccl_tuning": (("coll", "VARCHAR"), ("algo", "VARCHAR"), ("proto", "VARCHAR"), ("latency_us", "DOUBLE"),
                    ("bw_gbs", "DOUBLE"), ("line", "BIGINT")),
    "nccl_graphs": (("pattern", "BIGINT"), ("cross_nic", "BIGINT"), ("nchannels", "BIGINT"),
                    ("bw_intra", "DOUBLE"), ("bw_inter", "DOUBLE"), ("type", "VARCHAR"), ("line", "BIGINT")),
    "nccl_topo_links": (("kind", "VARCHAR"), ("count", "BIGINT"), ("max_bw", "DOUBLE"), ("targets", "VARCHAR")),
    "nccl_p2p_refused": (("host", "VARCHAR"), ("dev_a", "VARCHAR"), ("dev_b", "VARCHAR"), ("count", "BIGINT")),
    "nccl_nvls": (("name", "VARCHAR"), ("value", "BIGINT")),
    "nccl_tests_rows": (("tbl", "BIGINT"), ("line", "BIGINT"), ("size", "BIGINT"), ("count", "BIGINT"),
                        ("type", "VARCHAR"), ("redop", "VARCHAR"), ("root", "BIGINT"),
                        ("oop_time_us", "DOUBLE"), ("oop_algbw", "DOUBLE"), ("oop_busbw", "DOUBLE"),
                        ("oop_wrong", "DOUBLE"), ("ip_time_us", "DOUBLE"), ("ip_algbw", "DOUBLE"),
                        ("ip_busbw", "DOUBLE"), ("ip_wrong", "DOUBLE")),
    "nccl_counters": (("name", "VARCHAR"), ("value", "BIGINT")),
    "meta": (("key", "VARCHAR"), ("value", "VARCHAR")),
}


OPTIONAL_TABLES = frozenset({"nccl_warning_procs"})

# A small log's rows of every table above, as read back after the ingest wrote them, in one JSON value (one row,
# one column ``rows``): a job of a thousand per-rank logs is merged by reading one value per file instead of
# querying every table of every file (``store.read_many``). The tables stay the data; this is a copy of them, and
# a store without it (a large log, or a store written before it) is read table by table.
ROWS_COPY_TABLE = "nccl_rows_copy"
ROWS_COPY_MAX_ROWS = 5_000   # a per-rank log has a few hundred rows; a larger log is read table by table


def ddl() -> list[str]:
    return [f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)})" for name, cols in NCCL_TABLES.items()]


# A stored cell: the Python value of a VARCHAR, BIGINT, DOUBLE or BOOLEAN column (NULL: None).
Cell = str | int | float | bool | None
# A table's rows as read (``store.select_rows``, the rows' JSON copy): what ``merge`` works on, table by table.
RawTables = dict[str, list[dict[str, Cell]]]


# Each table's row as read back, typed by its columns above (``tests/analysis/test_nccl_store.py`` checks that
# every table has its type with the same columns and types): what ``store.build`` reads.
class StoredRank(TypedDict):
    comm_id: str
    rank: int
    nranks: int | None
    host: str | None
    pid: int | None
    cuda_dev: int | None
    nvml_dev: int | None
    bus_id: str | None
    label: int | None
    complete: bool
    line: int


class StoredLabel(TypedDict):
    label: int
    host: str | None
    pid: int | None
    dev: int | None
    line: int


class StoredDevice(TypedDict):
    rank: int | None
    pid: int | None
    host: str | None
    device: int | None
    bus: str | None
    gpu: str | None
    line: int


class StoredNic(TypedDict):
    host: str | None
    net: str
    idx: int
    name: str
    port: int | None
    link: str | None
    speed_mbps: int | None
    virtual: bool
    line: int | None


class StoredNetNote(TypedDict):
    kind: str
    what: str
    host: str | None
    count: int | None
    repeats: int
    text: str
    line: int


class StoredNetwork(TypedDict):
    name: str
    lines: int


class StoredOob(TypedDict):
    host: str
    interface: str


class StoredGdr(TypedDict):
    host: str | None
    scope: str
    gpu: str | None
    hca: int | None
    hca_name: str | None
    enabled: bool
    distance: int | None
    level: int | None
    op: str | None
    reason: str | None
    read: int | None
    dev: int | None
    repeats: int
    line: int
    text: str | None


class StoredConnection(TypedDict):
    channel: int
    conn: int | None
    src: int
    dst: int
    src_tag: str | None
    dst_tag: str | None
    direction: str | None
    host: str | None
    pid: int | None
    dev: int | None
    label: int | None
    transport: str
    kind: str
    net: str | None
    nic: int | None
    proxy_rank: int | None
    gdr: bool
    shared: bool
    mode: str | None
    read: bool
    line: int
    text: str | None


class StoredRing(TypedDict):
    channel: int
    ranks: str
    line: int


class StoredTree(TypedDict):
    channel: int
    rank: int
    up: int | None
    down: str
    line: int


class StoredCount(TypedDict):
    """A named count (``nccl_channel_counts``, ``nccl_nvls``, ``nccl_counters``)."""

    name: str
    value: int


class StoredEnv(TypedDict):
    name: str
    value: str | None
    distinct_values: int
    count: int
    set_by: str
    line: int | None


class StoredWarning(TypedDict):
    line: int
    kind: str
    message: str
    host: str | None
    pid: int | None
    tid: int | None
    dev: int | None
    label: int | None
    source: str | None


class StoredWarningCount(TypedDict):
    kind: str
    count: int


class StoredWarningProc(TypedDict):
    kind: str
    host: str | None
    pid: int | None
    label: int | None
    count: int


class StoredFailure(TypedDict):
    line: int
    label: int | None
    kind: str
    text: str


class StoredAlgoCall(TypedDict):
    coll: str | None
    bytes: int | None
    algo: str | None
    proto: str | None
    channels: int | None
    calls: int
    line: int


class StoredTuning(TypedDict):
    coll: str
    algo: str | None
    proto: str
    latency_us: float | None
    bw_gbs: float | None
    line: int


class StoredGraph(TypedDict):
    pattern: int | None
    cross_nic: int | None
    nchannels: int | None
    bw_intra: float | None
    bw_inter: float | None
    type: str | None
    line: int


class StoredTopoLink(TypedDict):
    kind: str
    count: int
    max_bw: float | None
    targets: str


class StoredP2pRefused(TypedDict):
    host: str | None
    dev_a: str
    dev_b: str
    count: int


class StoredTestsRow(TypedDict):
    tbl: int
    line: int
    size: int | None
    count: int | None
    type: str | None
    redop: str | None
    root: int | None
    oop_time_us: float | None
    oop_algbw: float | None
    oop_busbw: float | None
    oop_wrong: float | None
    ip_time_us: float | None
    ip_algbw: float | None
    ip_busbw: float | None
    ip_wrong: float | None


class StoredMeta(TypedDict):
    key: str
    value: str


class Tables(TypedDict):
    """A log's tables, typed (``store.typed``): one key per table of ``NCCL_TABLES``."""

    nccl_ranks: list[StoredRank]
    nccl_labels: list[StoredLabel]
    nccl_devices: list[StoredDevice]
    nccl_nics: list[StoredNic]
    nccl_net_notes: list[StoredNetNote]
    nccl_networks: list[StoredNetwork]
    nccl_oob: list[StoredOob]
    nccl_gdr: list[StoredGdr]
    nccl_connections: list[StoredConnection]
    nccl_rings: list[StoredRing]
    nccl_trees: list[StoredTree]
    nccl_channel_counts: list[StoredCount]
    nccl_env: list[StoredEnv]
    nccl_warnings: list[StoredWarning]
    nccl_warning_counts: list[StoredWarningCount]
    nccl_warning_procs: list[StoredWarningProc]
    nccl_failures: list[StoredFailure]
    nccl_algo_calls: list[StoredAlgoCall]
    nccl_tuning: list[StoredTuning]
    nccl_graphs: list[StoredGraph]
    nccl_topo_links: list[StoredTopoLink]
    nccl_p2p_refused: list[StoredP2pRefused]
    nccl_nvls: list[StoredCount]
    nccl_tests_rows: list[StoredTestsRow]
    nccl_counters: list[StoredCount]
    meta: list[StoredMeta]
