"""The DuckDB tables an NCCL log is normalized into: names, columns and types, in one place."""

from __future__ import annotations

NCCL_SCHEMA_VERSION = 1

# table -> ((column, DuckDB type), ...). Lists of ranks are stored as space-separated text ("0 1 2 3").
NCCL_TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "nccl_ranks": (("comm_id", "VARCHAR"), ("rank", "INTEGER"), ("nranks", "INTEGER"), ("host", "VARCHAR"),
                   ("pid", "BIGINT"), ("cuda_dev", "INTEGER"), ("nvml_dev", "INTEGER"), ("bus_id", "VARCHAR"),
                   ("label", "INTEGER"), ("complete", "BOOLEAN"), ("line", "BIGINT")),
    "nccl_labels": (("label", "INTEGER"), ("host", "VARCHAR"), ("pid", "BIGINT"), ("dev", "INTEGER"),
                    ("line", "BIGINT")),
    "nccl_devices": (("rank", "INTEGER"), ("pid", "BIGINT"), ("host", "VARCHAR"), ("device", "INTEGER"),
                     ("bus", "VARCHAR"), ("gpu", "VARCHAR"), ("line", "BIGINT")),
    "nccl_nics": (("host", "VARCHAR"), ("net", "VARCHAR"), ("idx", "INTEGER"), ("name", "VARCHAR"),
                  ("port", "INTEGER"), ("link", "VARCHAR"), ("speed_mbps", "BIGINT"), ("virtual", "BOOLEAN"),
                  ("line", "BIGINT")),
    "nccl_net_notes": (("kind", "VARCHAR"), ("what", "VARCHAR"), ("host", "VARCHAR"), ("count", "INTEGER"),
                       ("repeats", "BIGINT"), ("text", "VARCHAR"), ("line", "BIGINT")),
    "nccl_networks": (("name", "VARCHAR"), ("lines", "BIGINT")),
    "nccl_oob": (("host", "VARCHAR"), ("interface", "VARCHAR")),
    "nccl_gdr": (("host", "VARCHAR"), ("scope", "VARCHAR"), ("gpu", "VARCHAR"), ("hca", "INTEGER"),
                 ("hca_name", "VARCHAR"), ("enabled", "BOOLEAN"), ("distance", "INTEGER"), ("level", "INTEGER"),
                 ("op", "VARCHAR"), ("reason", "VARCHAR"), ("read", "INTEGER"), ("dev", "INTEGER"),
                 ("repeats", "BIGINT"), ("line", "BIGINT"), ("text", "VARCHAR")),
    "nccl_connections": (("channel", "INTEGER"), ("conn", "INTEGER"), ("src", "INTEGER"), ("dst", "INTEGER"),
                         ("src_tag", "VARCHAR"), ("dst_tag", "VARCHAR"), ("direction", "VARCHAR"),
                         ("host", "VARCHAR"), ("pid", "BIGINT"), ("dev", "INTEGER"), ("label", "INTEGER"),
                         ("transport", "VARCHAR"), ("kind", "VARCHAR"), ("net", "VARCHAR"), ("nic", "INTEGER"),
                         ("proxy_rank", "INTEGER"), ("gdr", "BOOLEAN"), ("shared", "BOOLEAN"), ("mode", "VARCHAR"),
                         ("read", "BOOLEAN"), ("line", "BIGINT"), ("text", "VARCHAR")),
    "nccl_rings": (("channel", "INTEGER"), ("ranks", "VARCHAR"), ("line", "BIGINT")),
    "nccl_trees": (("channel", "INTEGER"), ("rank", "INTEGER"), ("up", "INTEGER"), ("down", "VARCHAR"),
                   ("line", "BIGINT")),
    "nccl_channel_counts": (("name", "VARCHAR"), ("value", "BIGINT")),
    "nccl_env": (("name", "VARCHAR"), ("value", "VARCHAR"), ("distinct_values", "INTEGER"), ("count", "BIGINT"),
                 ("set_by", "VARCHAR"), ("line", "BIGINT")),
    "nccl_warnings": (("line", "BIGINT"), ("kind", "VARCHAR"), ("message", "VARCHAR"), ("host", "VARCHAR"),
                      ("pid", "BIGINT"), ("tid", "BIGINT"), ("dev", "INTEGER"), ("label", "INTEGER"),
                      ("source", "VARCHAR")),
    "nccl_warning_counts": (("kind", "VARCHAR"), ("count", "BIGINT")),
    "nccl_failures": (("line", "BIGINT"), ("label", "INTEGER"), ("kind", "VARCHAR"), ("text", "VARCHAR")),
    "nccl_algo_calls": (("coll", "VARCHAR"), ("bytes", "BIGINT"), ("algo", "VARCHAR"), ("proto", "VARCHAR"),
                        ("channels", "INTEGER"), ("calls", "BIGINT"), ("line", "BIGINT")),
    "nccl_tuning": (("coll", "VARCHAR"), ("algo", "VARCHAR"), ("proto", "VARCHAR"), ("latency_us", "DOUBLE"),
                    ("bw_gbs", "DOUBLE"), ("line", "BIGINT")),
    "nccl_graphs": (("pattern", "INTEGER"), ("cross_nic", "INTEGER"), ("nchannels", "INTEGER"),
                    ("bw_intra", "DOUBLE"), ("bw_inter", "DOUBLE"), ("type", "VARCHAR"), ("line", "BIGINT")),
    "nccl_topo_links": (("kind", "VARCHAR"), ("count", "BIGINT"), ("max_bw", "DOUBLE"), ("targets", "VARCHAR")),
    "nccl_p2p_refused": (("host", "VARCHAR"), ("dev_a", "VARCHAR"), ("dev_b", "VARCHAR"), ("count", "BIGINT")),
    "nccl_nvls": (("name", "VARCHAR"), ("value", "BIGINT")),
    "nccl_tests_rows": (("tbl", "INTEGER"), ("line", "BIGINT"), ("size", "BIGINT"), ("count", "BIGINT"),
                        ("type", "VARCHAR"), ("redop", "VARCHAR"), ("root", "INTEGER"),
                        ("oop_time_us", "DOUBLE"), ("oop_algbw", "DOUBLE"), ("oop_busbw", "DOUBLE"),
                        ("oop_wrong", "DOUBLE"), ("ip_time_us", "DOUBLE"), ("ip_algbw", "DOUBLE"),
                        ("ip_busbw", "DOUBLE"), ("ip_wrong", "DOUBLE")),
    "nccl_counters": (("name", "VARCHAR"), ("value", "BIGINT")),
    "meta": (("key", "VARCHAR"), ("value", "VARCHAR")),
}


def ddl() -> list[str]:
    return [f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)})" for name, cols in NCCL_TABLES.items()]
