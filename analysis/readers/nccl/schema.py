"""The DuckDB tables an NCCL log is normalized into: names, columns and types, in one place."""

from __future__ import annotations

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
