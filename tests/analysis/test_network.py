"""NCCL's network transfers (``ncclNet*`` NVTX events) on the corpus' 2-node pair: every number against
the export's own NVTX text, read here with SQLite and a regular expression of this test's own."""

from __future__ import annotations

import re
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from analysis import fmt
from analysis.model.network import report_network, run_matrix
from analysis.model.trace import Trace
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

R0 = "nccl-ring-2node-r0-ault43.sqlite"
R1 = "nccl-ring-2node-r1-ault44.sqlite"
ARGS = re.compile(r"^ncclNet(\w+)\(\): Data_Size: (\d+), Sender_Rank: (\d+), Receiver_Rank: (\d+), "
                  r"Channel_ID: (\d+), Sequence: (\d+)$")


def _raw(name: str) -> dict[tuple, list[tuple[int, int | None]]]:
    """(direction, sender, receiver, channel) -> [(bytes, post-to-done ns)] straight from the export."""
    con = sqlite3.connect(corpus_file(name))
    rows = con.execute("""SELECT n.start, COALESCE(n.text, s.value) FROM NVTX_EVENTS n
                          LEFT JOIN StringIds s ON s.id = n.textId
                          WHERE COALESCE(n.text, s.value) LIKE 'ncclNet%' ORDER BY n.start""").fetchall()
    con.close()
    posts, dones = defaultdict(list), defaultdict(list)
    for start, text in rows:
        m = ARGS.match(text)
        if not m:
            continue
        op, size, snd, rcv, ch, seq = m.groups()
        direction = "send" if op in ("Isend", "SendTest") else "recv"
        key = (direction, int(snd), int(rcv), int(ch), int(seq))
        (posts if op in ("Isend", "Irecv") else dones)[key].append((start, int(size)))
    out = defaultdict(list)
    for key, ps in posts.items():
        ds = dones.get(key, [])
        for k, (start, size) in enumerate(ps):
            out[key[:4]].append((size, ds[k][0] - start if k < len(ds) else None, start))
    return out


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


@pytest.mark.parametrize("name", [R0, R1])
def test_transfers_match_the_nvtx_text(name: str) -> None:
    raw = _raw(name)
    assert raw, "the pair records its network ranges"
    t = Trace(ingested(corpus_file(name)), name)
    try:
        net = report_network(t, None)
        offset = t.session_start_utc_ns
    finally:
        t.close()
    assert net["has_ranges"]
    chans = {(c["direction"], c["sender_rank"], c["receiver_rank"], c["channel"]): c for c in net["channels"]}
    assert set(chans) == set(raw)
    for key, items in raw.items():
        c = chans[key]
        assert c["transfers"] == len(items)
        assert c["bytes"] == sum(s for s, _, _ in items)
        assert c["completed"] == sum(1 for _, d, _ in items if d is not None)
        assert c["post_to_done_ns"] == sum(d for _, d, _ in items if d is not None)
        flight = _union([(p, p + d) for _, d, p in items if d is not None])
        assert c["in_flight_ns"] == flight
        assert c["bandwidth_bps"] == pytest.approx(c["completed_bytes"] * 1e9 / flight, rel=1e-9)
    # per peer pair: the channels' transfers and bytes summed
    for p in net["peers"]:
        mine = [v for k, v in raw.items() if k[:3] == (p["direction"], p["sender_rank"], p["receiver_rank"])]
        assert p["transfers"] == sum(len(v) for v in mine)
        assert p["bytes"] == sum(s for v in mine for s, _, _ in v)
        assert p["channels"] == len(mine)
    assert offset is not None


def test_the_run_matrix_names_both_hosts_and_the_slowest_link() -> None:
    nets = []
    for name in (R0, R1):
        t = Trace(ingested(corpus_file(name)), name)
        try:
            nets.append((t.rank, t.meta.get("host"), report_network(t, None)))
        finally:
            t.close()
    m = run_matrix(nets)
    assert m is not None
    assert {(r["sender"], r["receiver"]) for r in m["links"]} == {(0, 1), (1, 0)}
    for link in m["links"]:  # the sender's own count of its sends
        raw = _raw(R0 if link["sender"] == 0 else R1)
        sends = [v for k, v in raw.items() if k[0] == "send" and k[1:3] == (link["sender"], link["receiver"])]
        assert link["bytes"] == sum(s for v in sends for s, _, _ in v)
        assert link["inter_node"] is True and link["seen_by"] == "send"
    assert m["inter_node_bytes"] == sum(r["bytes"] for r in m["links"]) and m["intra_node_bytes"] == 0
    slow = min(m["links"], key=lambda r: r["bandwidth_bps"])
    assert (m["slowest"]["sender"], m["slowest"]["receiver"]) == (slow["sender"], slow["receiver"])
    assert m["senders_across_nodes"] == [0, 1]


def test_a_rank_without_network_ranges_says_so() -> None:
    t = Trace(ingested(corpus_file("vecadd-2026.sqlite")), "vecadd")
    try:
        net = report_network(t, None)
    finally:
        t.close()
    assert net["has_ranges"] is False and net["peers"] == [] and "no NCCL network ranges" in net["reason"]
    m = run_matrix([(0, "a", {"has_ranges": False}), (1, "b", None)])
    assert m is None  # nothing recorded: no matrix, never a guess


def test_a_file_written_before_the_table_reads_the_nvtx_events(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    shutil.copyfile(ingested(corpus_file(R0)), path)
    t = Trace(path, "new")
    try:
        with_table = report_network(t, None)
    finally:
        t.close()
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE net_transfers; UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    t = Trace(path, "old")
    try:
        assert "net_transfers" not in t.tables
        assert report_network(t, None) == with_table
    finally:
        t.close()


def test_comm003_takes_the_network_sizes_when_the_payloads_are_absent() -> None:
    from analysis.api import analyze

    out = analyze([ingested(corpus_file(R0))], labels=[R0], rules=["COMM003"], window="all").to_json()
    (f,) = out["findings"]
    net = f["network"]
    sends = [(s, d, p) for k, v in _raw(R0).items() if k[0] == "send" for s, d, p in v]
    assert net["bytes_sent"] == sum(s for s, _, _ in sends) == 8 * 1048576
    flight = _union([(p, p + d) for _, d, p in sends if d is not None])
    assert net["in_flight_ns"] == flight
    assert net["bandwidth_bps"] == pytest.approx(net["completed_bytes"] * 1e9 / flight, rel=1e-9)
    assert net["efficiency_pct"] == pytest.approx(100 * net["bandwidth_bps"] / (net["peak_gbps"] * 1e9), abs=1e-3)
    assert "network sends 8.39 MB in 8 send(s) to rank(s) 1" in f["title"]
    assert f["impact_ns"] == 0  # kernel time alone still cannot say what a faster link would save


def test_the_pair_splits_its_collective_into_wait_transfer_and_the_hosts_launch() -> None:
    from analysis.run.runner import analyze_run

    paths = [ingested(corpus_file(R0)), ingested(corpus_file(R1))]
    out = analyze_run(paths, labels=[R0, R1]).to_json()
    rows = []
    for p in paths:
        t = Trace(p, p.name)
        try:
            (start, end, launch), = t.sql("""SELECT k.start_ns, k.end_ns, a.start_ns FROM kernels k JOIN cuda_api a
                                            ON a.pid = k.pid AND a.correlation_id = k.correlation_id
                                            WHERE k.category = 'nccl'""")
            base = int(t.session_start_utc_ns)
            rows.append((base + start, base + end, base + launch))  # Python ints: exact
        finally:
            t.close()
    last = max(r[0] for r in rows)
    first_launch = min(r[2] for r in rows)
    split = out["collectives"]
    assert split["instances"] == 1
    for r, (start, end, launch) in zip(split["per_rank"], rows, strict=True):
        assert r["wait_ns"] == last - start and r["transfer_ns"] == end - last
        assert r["launch_delay_ns"] == launch - first_launch and r["gpu_queue_ns"] == start - launch
    late = split["longest_launch_delay"]
    assert late["rank"] == 1 and late["delay_ns"] == rows[1][2] - rows[0][2] > 0
    # the straggler's lateness is its host's later launch plus its longer queue on the GPU
    (c2,) = [f for f in out["findings"] if f["rule_id"] == "COMM002"]
    assert c2["impact_ns"] == split["per_rank"][0]["wait_ns"]


def test_the_text_report_names_the_links_the_slowest_and_each_rule_once() -> None:
    from analysis.run.runner import analyze_run
    from goodput_cli.render import text

    out = analyze_run([ingested(corpus_file(R0)), ingested(corpus_file(R1))], labels=[R0, R1]).to_json()
    report = text(out)
    slow = out["network"]["slowest"]
    assert f"rank 0 -> rank 1 (inter-node): {fmt.size(8 * 2**20)} in 8 sends on 2 channel(s)" in report
    assert (f"slowest link: rank {slow['sender']} ({slow['sender_host']}) -> rank {slow['receiver']} "
            f"({slow['receiver_host']}), {slow['bandwidth_bps'] / 1e9:.2f} GB/s") in report
    # one line per rule in the ranking, each with its ranks
    ranked = [line for line in report.splitlines() if line[:5].strip().rstrip(".").isdigit()]
    rules = [line.split("] ", 1)[1].split()[0] for line in ranked]
    assert len(rules) == len(set(rules)) and report.count("     per rank: rank 0") + report.count(", rank 0 (") >= 1
    assert "longest host launch delay: rank 1 (ault44.cscs.ch)" in report


def test_a_run_with_one_rank_without_ranges_names_it_and_guesses_nothing() -> None:
    t = Trace(ingested(corpus_file(R0)), R0)
    try:
        net0 = report_network(t, None)
    finally:
        t.close()
    m = run_matrix([(0, "ault43", net0), (1, "ault44", {"has_ranges": False, "peers": []}), (2, "ault44", None)])
    assert m is not None and m["without_ranges"] == [1, 2]
    # rank 1's sends are unknown (its report has no ranges): only rank 0's own sends and what rank 0 received
    assert {(r["sender"], r["receiver"], r["seen_by"]) for r in m["links"]} == {(0, 1, "send"), (1, 0, "recv")}
