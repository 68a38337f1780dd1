"""How a run's NCCL log is joined to its nsys exports (``analysis.run.nccl_step``): by host and process id where
both sides name them, else by host and rank with the reason; a process of another run is never joined by its
rank number. The logs are the nccl-ring-2node job's per-rank logs (planted with the process ids its two
exports recorded, read by SQL); the exports' summaries carry what their own summary step writes (host, rank,
world size, pids)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from analysis.network_path import NetworkPath, RunNetworkPath
from analysis.readers import ToolKind
from analysis.readers.nccl import ingest
from analysis.report_types import LinksJoin
from analysis.run.facts import ReportResult
from analysis.run.nccl_step import achieved_links, analyze_logs, join_all
from tests.nccl_planted import RING_EXPORTS, export_pids, ring_2node_rank_logs


def _path(tmp_path: Path, pids: tuple[int, int] | None = None) -> RunNetworkPath:
    """The run's path before the join: the logs' path as their report summary holds it, read back."""
    logs = ring_2node_rank_logs(tmp_path, pids)
    dbs = []
    for p in logs:
        ingest(p, p.with_suffix(".duckdb"))
        dbs.append((p.with_suffix(".duckdb"), p.name))
    return RunNetworkPath(report=logs[0].name,
                          path=NetworkPath.from_json(analyze_logs(dbs, "all")[0].info["network_path"]))


def _exports(with_pids: bool = True) -> list[ReportResult]:
    out = []
    for rank, (name, host) in enumerate(zip(RING_EXPORTS, ("ault43.cscs.ch", "ault44.cscs.ch"), strict=True)):
        info = {"file": name, "tool": "nsys", "host": host, "rank": rank, "world_size": 2,
                "pids": export_pids(name) if with_pids else []}
        out.append(ReportResult(name, ToolKind.NSYS.value, info, [], {}, {"rank": rank}, None, "all"))
    return out


def _joined(path: RunNetworkPath, results: list[ReportResult]) -> LinksJoin:
    """How ``achieved_links`` joined the exports' links with the log's pairs."""
    joined = achieved_links(path, MATRIX, results)
    assert joined is not None and joined.links_join is not None
    return joined.links_join


MATRIX = {"links": [{"sender": 0, "receiver": 1, "sender_host": "ault43.cscs.ch", "receiver_host": "ault44.cscs.ch",
                     "bytes": 8_388_608, "transfers": 4, "in_flight_ns": 1_000_000, "bandwidth_bps": 8.4e9,
                     "channels": 2, "inter_node": True}]}


def test_joined_by_host_and_process_id(tmp_path):
    path = _path(tmp_path)
    assert [(r.rank, r.host, r.pid) for r in path.path.ranks] == [
        (0, "ault43", export_pids(RING_EXPORTS[0])[0]), (1, "ault44", export_pids(RING_EXPORTS[1])[0])]
    results = _exports()
    assert [(j["nccl_ranks"], j["by"]) for j in join_all(path.path, [r.info for r in results])] == [
        ([0], "host+pid"), ([1], "host+pid")]
    path = achieved_links(path, MATRIX, results)
    assert path is not None and path.links is not None
    assert path.links_join == {"joined": True, "reason": None, "without_log_pair": 0, "by": "host+pid",
                               "by_reason": None}
    assert [(k["sender"], k["receiver"], k["transports"]) for k in path.links] == [(0, 1, ["NET/Socket/0"])]


def test_exports_without_process_ids_fall_back_to_host_and_rank_and_say_why(tmp_path):
    path = _path(tmp_path)
    results = _exports(with_pids=False)
    assert [(j["nccl_ranks"], j["by"]) for j in join_all(path.path, [r.info for r in results])] == [
        ([0], "host+rank"), ([1], "host+rank")]
    join = _joined(path, results)
    assert join["joined"] is True and join["by"] == "host+rank"
    assert join["by_reason"] == f"{RING_EXPORTS[0]} records no host or process id"


def test_a_log_without_process_ids_falls_back_to_host_and_rank(tmp_path):
    path = _path(tmp_path)
    path = dataclasses.replace(path, path=dataclasses.replace(
        path.path, ranks=tuple(dataclasses.replace(r, pid=None) for r in path.path.ranks)))
    join = _joined(path, _exports())
    assert join["by"] == "host+rank"
    assert join["by_reason"] == "the log names no host and process id for its ranks"


def test_another_runs_processes_are_not_joined_by_rank(tmp_path):
    [p0], [p1] = (export_pids(n) for n in RING_EXPORTS)
    path = _path(tmp_path, (p0 + 7, p1 + 7))  # a restarted job: same hosts and ranks, new processes
    results = _exports()
    matched = join_all(path.path, [r.info for r in results])
    assert [j["nccl_ranks"] for j in matched] == [[], []]
    assert matched[0]["reason"] == f"its processes ({p0} on ault43.cscs.ch) are no rank of the log: another run"
    joined = achieved_links(path, MATRIX, results)
    assert joined is not None and joined.links_join is not None
    assert joined.links_join["joined"] is False and joined.links is None
    assert joined.links_join["reason"].startswith(f"{RING_EXPORTS[0]} is process {p0} on ault43.cscs.ch, which "
                                                  f"is no rank of the log (its processes on that host: {p0 + 7})")
    # without the exports' process ids, only host and rank can be checked, and they agree: joined, and said so
    fallback = _joined(path, _exports(with_pids=False))
    assert fallback["joined"] is True and fallback["by"] == "host+rank"


def test_an_export_whose_process_is_another_rank_of_the_log_is_not_joined(tmp_path):
    [p0], [p1] = (export_pids(n) for n in RING_EXPORTS)
    path = _path(tmp_path)
    results = _exports()
    results[0].info["host"], results[0].info["pids"] = "ault44.cscs.ch", [p1]  # rank 0's export is rank 1's process
    join = _joined(path, results)
    assert join["joined"] is False
    assert join["reason"] == (f"{RING_EXPORTS[0]} is rank 0, but its process (ault44.cscs.ch:{p1}) is "
                              "the log's rank 1: the exports and the log number their ranks differently")
