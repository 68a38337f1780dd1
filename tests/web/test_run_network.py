"""The run page's network matrix on the corpus' 2-node pair: every cell's bytes equal the sender's own
ncclNetIsend ranges (their Data_Size summed, read from the export with SQLite), the slowest link named."""

from __future__ import annotations

import re
import sqlite3
from html import unescape

from tests.conftest import corpus_file
from tests.web import seed

NCCL_R0, NCCL_R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"
SEND = re.compile(r"^ncclNetIsend\(\): Data_Size: (\d+), Sender_Rank: (\d+), Receiver_Rank: (\d+),")


def _sent(name: str) -> dict[tuple[int, int], int]:
    con = sqlite3.connect(corpus_file(name))
    out: dict[tuple[int, int], int] = {}
    for (text,) in con.execute("SELECT COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
                               "ON s.id = n.textId WHERE COALESCE(n.text, s.value) LIKE 'ncclNetIsend%'"):
        m = SEND.match(text)
        if m:
            key = (int(m.group(2)), int(m.group(3)))
            out[key] = out.get(key, 0) + int(m.group(1))
    con.close()
    return out


def test_the_run_page_shows_the_rank_by_rank_network_heat_map(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="net")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="network-matrix"' in html
    cells = re.findall(r'<tr data-rank="(\d+)">(.*?)</tr>', html.split('id="network-matrix"')[1].split("</table>")[0],
                       re.S)
    sent = {**_sent(NCCL_R0), **_sent(NCCL_R1)}
    assert sent == {(0, 1): 8 * 1048576, (1, 0): 8 * 1048576}
    seen = {}
    for sender, row in cells:
        for j, nbytes in enumerate(re.findall(r'<td(?: class="num(?: slowest)?" data-heat="[\d.]+" data-bytes="(\d+)")?', row)):
            if nbytes:
                seen[(int(sender), j)] = int(nbytes)
    assert seen == sent
    slowest = unescape(re.search(r'id="network-slowest">(.*?)</strong>', html, re.S).group(1))
    assert "ault43" in slowest or "ault44" in slowest
    assert "inter-node" in html


def test_the_run_page_splits_the_collectives_by_host(client, db, settings, ingested) -> None:
    from analysis.api import analyze

    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="split")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    table = html.split('id="collectives-by-host"')[1].split("</table>")[0]
    shown = {host: int(ns) for host, ns in re.findall(r"<td>([^<]+)</td><td class=\"num\">\d+</td>\s*"
                                                       r"<td class=\"num\" data-ns=\"(\d+)\"", table)}
    result = analyze([ingested.get(corpus_file(n))[0] for n in (NCCL_R0, NCCL_R1)], labels=[NCCL_R0, NCCL_R1]).to_json()
    assert shown == {h["host"]: h["wait_ns"] for h in result["collectives"]["per_host"]}
    # whom each rank waited for, as the JSON's participants say (the waiting named, on the run page)
    from analysis.api import fmt

    whom = html.split('id="collectives-waited-for"')[1].split("</table>")[0]
    cells = {rank: unescape(who) for rank, who in re.findall(
        r"<tr><td>(rank \d)</td><td>[^<]*</td>\s*<td class=\"num\" data-ns=\"\d+\">[^<]*</td>\s*<td>(.*?)</td>", whom, re.S)}
    parts = result["collectives"]["participants"]
    assert cells == {p["rank"]: ", ".join(f"{k} {fmt.duration(v)}" for k, v in p["waited_for"].items()) or "–"
                     for p in parts}
    assert any(p["waited_for"] for p in parts)
    assert "launch-delay" in html and "ault44" in html.split('id="launch-delay">')[1].split("</strong>")[0]


def test_the_run_page_groups_the_network_by_node_and_says_no_traffic(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="nodes")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    matrix = html.split('id="network-matrix"')[1].split("</table>")[0]
    # a rank's sends to itself: both reports record the network, so the empty cell is "no traffic", not unknown
    assert matrix.count('data-status="no traffic"') == 2 and 'data-status="not recorded"' not in matrix
    nodes = html.split('id="network-nodes"')[1].split("</table>")[0]
    rows = re.findall(r'<tr data-host="([^"]+)">', nodes)
    assert rows == ["ault43.cscs.ch", "ault44.cscs.ch"]


def test_the_run_page_says_what_does_not_belong(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1),
                                                     corpus_file("saxpy-mpi-rank0-perlmutter.sqlite")], job="mixed")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    box = html.split('id="run-warnings"')[1].split("</div>")[0]
    codes = re.findall(r'data-code="([a-z_]+)"', box)
    assert "clock_apart" in codes and "jobs_differ" in codes
    assert "saxpy-mpi-rank0-perlmutter" in unescape(box.split('data-code="clock_apart"')[1])
    clean = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="clean")
    assert 'id="run-warnings"' not in client.get(f"/runs/{clean}").get_data(as_text=True)


def test_the_run_page_splits_mpi_waits_and_names_ranks_sharing_cpus(client, db, settings, ingested, tmp_path) -> None:
    """The planted two-rank MPI run (``tests.analysis.test_mpi_waits``): the MPI card shows each rank's waiting
    for its peer as the analysis computes it; and the four-rank run whose nodes each hold two ranks on the same
    CPUs (``tests.analysis.test_shared_cpu``) says so in the warnings box."""
    from analysis.api import analyze
    from tests.analysis.many_ranks import build_rank
    from tests.analysis.test_mpi_waits import R0, _rank1

    r0, r1 = corpus_file(R0), _rank1(tmp_path / "saxpy-rank1.sqlite")
    run_id = seed.store_run(db, settings, ingested, [r0, r1], job="mpi")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    table = html.split('id="mpi-by-rank"')[1].split("</table>")[0]
    shown = {rank: int(ns) for rank, ns in re.findall(
        r'<tr><td>(rank \d)</td>.*?data-ns="\d+">.*?</td><td class="num" data-ns="(\d+)"', table, re.S)}
    result = analyze([ingested.get(p)[0] for p in (r0, r1)], labels=["a", "b"]).to_json()
    assert shown == {p["rank"]: p["wait_ns"] for p in result["collectives"]["mpi"]["per_rank"]}
    assert "rank 0" in html.split('id="mpi-critical">')[1].split("</strong>")[0]
    # three ranks with an Allreduce: the collectives table names the last to arrive; point-to-point is left out
    from tests.analysis.test_mpi_waits import _three_ranks

    three = _three_ranks(tmp_path)
    html3 = client.get(f"/runs/{seed.store_run(db, settings, ingested, three, job='mpi3')}").get_data(as_text=True)
    res3 = analyze([ingested.get(p)[0] for p in three], labels=["a", "b", "c"]).to_json()["collectives"]["mpi"]
    coll = html3.split('id="mpi-collectives"')[1].split("</table>")[0]
    last = ", ".join(f"{k} ×{v}" for k, v in res3["collectives"][0]["last_arrivals"].items())
    assert "<td>MPI_Allreduce</td>" in coll and last in unescape(coll)
    left = unescape(html3.split('id="mpi-left-out"')[1].split("</p>")[0])
    for x in res3["left_out"]:  # the calls in each rank's window, as the analysis counts them
        assert f"{x['rank']} {x['call']} ×{x['calls']}: {x['reason']}" in left
    assert any(x["call"] == "MPI_Recv" and "3 ranks make MPI point-to-point calls" in x["reason"] for x in res3["left_out"])
    ranks = [build_rank(tmp_path / f"rank{k}.sqlite", k, 4, collectives=2) for k in range(4)]
    shared = seed.store_run(db, settings, ingested, ranks, job="shared")
    box = client.get(f"/runs/{shared}").get_data(as_text=True).split('id="run-warnings"')[1].split("</div>")[0]
    assert re.findall(r'data-code="([a-z_]+)"', box).count("shared_cpu") == 2
    assert "2 ranks of host ault43.cscs.ch run on the same logical CPUs" in unescape(box)
