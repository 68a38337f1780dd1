"""Retried network posts on a planted variant of the corpus' 2-node pair: a transfer is one (sender,
receiver, channel, sequence), its retried ``ncclNetIsend`` calls a count of their own, the time spent retrying
is waiting for the late receiver, never transfer. Expected numbers come from the planted export's NVTX text,
read here with SQLite."""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from analysis import fmt
from analysis.model.network import link_status, report_network, run_matrix
from analysis.model.trace import Trace
from tests.analysis.planting import clone_row, copy_export, ingest_copy, ingested, sqlite_rw
from tests.conftest import corpus_file

R0 = "nccl-ring-2node-r0-ault43.sqlite"
R1 = "nccl-ring-2node-r1-ault44.sqlite"
ARGS = re.compile(r"^ncclNet(\w+)\(\): Data_Size: (\d+), Sender_Rank: (\d+), Receiver_Rank: (\d+), "
                  r"Channel_ID: (\d+), Sequence: (\d+)$")
RETRIES = 40          # extra attempts before each of rank 1's sends
WAIT = 3_000_000      # ns: rank 1 starts retrying this long before its send is accepted


def _plant_retries(dst: Path) -> Path:
    """Rank 1's export with every ``ncclNetIsend`` preceded by ``RETRIES`` failed attempts, evenly spread over
    the ``WAIT`` ns before it: rank 1 waited for rank 0 (the late node) to post its receives."""
    copy_export(corpus_file(R1), dst)
    con = sqlite_rw(dst)
    with con:
        rows = con.execute("""SELECT n.rowid, n.start, n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                              WHERE COALESCE(n.text, s.value) LIKE 'ncclNetIsend(): Data_Size%'""").fetchall()
        for rowid, start, end in rows:
            for i in range(RETRIES):
                at = start - WAIT + i * (WAIT // RETRIES)
                clone_row(con, "NVTX_EVENTS", rowid, start=at, end=at + (end - start))
    con.close()
    return dst


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def _raw_sends(path: Path) -> dict[tuple[int, int, int, int], dict[str, object]]:
    """(sender, receiver, channel, sequence) -> its attempts, size and completion, straight from the export
    (this export reuses no sequence number, so a key is one transfer)."""
    con = sqlite3.connect(path)
    rows = con.execute("""SELECT n.start, COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s
                          ON s.id = n.textId WHERE COALESCE(n.text, s.value) LIKE 'ncclNet%: Data_Size%'""").fetchall()
    con.close()
    out: dict[tuple[int, int, int, int], dict[str, object]] = defaultdict(lambda: {"posts": [], "done": None})
    for start, text in rows:
        m = ARGS.match(text)
        assert m
        op, size, *key = m.groups()
        if op == "Isend":
            out[tuple(map(int, key))]["posts"].append(start)  # type: ignore[index, union-attr]
            out[tuple(map(int, key))]["bytes"] = int(size)  # type: ignore[index]
        elif op == "SendTest":
            out[tuple(map(int, key))]["done"] = start  # type: ignore[index]
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _plant_retries(tmp_path_factory.mktemp("net") / "r1-retries.sqlite")


def _network(path: Path, label: str, normalized: Path) -> tuple[int | None, str | None, dict]:
    t = Trace(normalized, label)
    try:
        return t.rank, t.meta.get("host"), report_network(t, None)
    finally:
        t.close()


def test_each_posted_transfer_counts_once_and_its_retries_apart(planted: Path, tmp_path: Path) -> None:
    raw = _raw_sends(planted)
    _, _, net = _network(planted, "r1", ingest_copy(planted, tmp_path / "r1.duckdb"))
    (send,) = [p for p in net["peers"] if p["direction"] == "send"]
    assert send["attempts"] == sum(len(v["posts"]) for v in raw.values()) == 8 * (RETRIES + 1)  # type: ignore[arg-type]
    assert send["transfers"] == len(raw) == 8 and send["retries"] == 8 * RETRIES
    assert send["bytes"] == sum(v["bytes"] for v in raw.values()) == 8 * 1048576  # type: ignore[misc]
    assert net["bytes_sent"] == send["bytes"]
    # bandwidth: completed bytes over the time the accepted posts were in flight (last attempt -> completion)
    flight = _union([(max(v["posts"]), v["done"]) for v in raw.values()])  # type: ignore[arg-type, type-var]
    assert send["in_flight_ns"] == flight
    assert send["bandwidth_bps"] == pytest.approx(send["completed_bytes"] * 1e9 / flight, rel=1e-9)
    # waiting: the time at least one send was being retried (first attempt -> accepted post)
    assert send["waiting_ns"] == _union([(min(v["posts"]), max(v["posts"])) for v in raw.values()])  # type: ignore[type-var]
    assert send["waiting_ns"] > 0
    # the unplanted rank: the same bytes and bandwidth (its retries add nothing to either)
    _, _, clean = _network(corpus_file(R1), "r1", ingested(corpus_file(R1)))
    (clean_send,) = [p for p in clean["peers"] if p["direction"] == "send"]
    assert (clean_send["bytes"], clean_send["bandwidth_bps"]) == (send["bytes"], send["bandwidth_bps"])
    assert clean_send["attempts"] == clean_send["transfers"] == 8 and clean_send["waiting_ns"] == 0


def test_the_slowest_link_is_never_the_waiting_one_and_the_late_rank_is_named(planted: Path, tmp_path: Path) -> None:
    nets = [_network(corpus_file(R0), R0, ingested(corpus_file(R0))),
            _network(planted, R1, ingest_copy(planted, tmp_path / "r1.duckdb"))]
    m = run_matrix(nets)
    assert m is not None
    links = {(r["sender"], r["receiver"]): r for r in m["links"]}
    waiting = links[(1, 0)]
    assert waiting["retries"] == 8 * RETRIES and waiting["waiting_for"] == 0 and links[(0, 1)]["waiting_for"] is None
    # rank 1 retried its sends (waiting for rank 0): its link is not slow; the other one is, as before planting
    assert (m["slowest"]["sender"], m["slowest"]["receiver"]) == (0, 1)
    assert waiting["bandwidth_bps"] > links[(0, 1)]["bandwidth_bps"]
    (late,) = m["waited_for"]
    assert late["rank"] == 0 and late["by"] == [1] and late["waiting_ns"] == waiting["waiting_ns"]
    assert m["transfers"] == 16 and m["attempts"] == 16 + 8 * RETRIES
    assert m["inter_node_bytes"] == 2 * 8 * 1048576


def test_the_text_says_attempts_waiting_and_nodes(planted: Path, tmp_path: Path) -> None:
    from analysis.run.runner import analyze_run
    from goodput_cli.render import text

    out = analyze_run([ingested(corpus_file(R0)), ingest_copy(planted, tmp_path / "r1.duckdb")],
                      labels=[R0, R1]).to_json()
    report = text(out)
    mib8 = fmt.size(8 * 1048576)
    assert f"rank 1 -> rank 0 (inter-node): {mib8} in 8 sends on 2 channel(s)" in report
    assert f"posted after {8 * (RETRIES + 1):,} attempts ({8 * RETRIES:,} retries)" in report
    assert "for rank 0 to post its receives" in report
    assert "waited for: rank 0 (ault43.cscs.ch)" in report
    assert (f"node ault43.cscs.ch (rank(s) 0): within {fmt.size(0)}, to other nodes {mib8}, from other nodes {mib8}"
            in report)


def test_no_traffic_is_not_the_same_as_not_recorded() -> None:
    recorded = {0, 1}
    assert link_status(0, 1, {(0, 1)}, recorded) == "traffic"
    assert link_status(2, 3, {(0, 1)}, recorded | {2}) == "no traffic"   # rank 2 records its sends: it sent none
    assert link_status(3, 4, {(0, 1)}, recorded) == "not recorded"      # neither end records the network
    nets = [(0, "a", {"has_ranges": True, "peers": []}), (1, "a", {"has_ranges": False}), (2, "b", None)]
    m = run_matrix(nets)
    assert m is not None and m["links"] == [] and m["without_ranges"] == [1, 2]
    assert [(n["host"], n["ranks"], n["ranks_recorded"]) for n in m["nodes"]] == [("a", [0, 1], [0]), ("b", [2], [])]
