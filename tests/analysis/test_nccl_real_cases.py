"""Real NCCL logs from outside the corpus (``nccl_real/``, with their sources in its README), and the table of
which NET rule has which real and planted case (docs/nccl.md, "Real and planted cases").

The excerpt of https://github.com/NVIDIA/nccl-tests/issues/350 is the one real log found in which NCCL prints one
GPU's GPUDirect lines for two NICs at different distances: the case NET003's "GPU off its closest NIC" check
reads. There the GPU uses its closest NIC, so the check is silent on the real log and fires when the same log
is edited to put the connections on the farther NIC."""

from __future__ import annotations

import re
from pathlib import Path

from analysis.diagnosis.nccl import findings
from analysis.readers.nccl import ingest, load
from tests.analysis import test_nccl_rules as rules

REAL = Path(__file__).parent / "nccl_real"
TWO_HCAS = REAL / "nccl-tests-350-n013-2x1-a100-two-hcas-2.16.log"
GDR_LINE = re.compile(r"GPU Direct RDMA Enabled for GPU (\w+) / HCA (\d+) \(distance (\d+) <= (\d+)\)")
CONN_LINE = re.compile(r"Channel (\d+)/\d+ : (\d+)\[\w+\] -> (\d+)\[\w+\] \[(\w+)\] via (NET/IB/(\d+)/GDRDMA)")


def _load(src: Path, tmp_path: Path, name: str = "log"):
    db = tmp_path / f"{name}.duckdb"
    ingest(src, db)
    return load(db)


def test_the_two_hca_excerpt_reads_as_the_log_says(tmp_path):
    text = TWO_HCAS.read_text()
    log = _load(TWO_HCAS, tmp_path)
    # the per-GPU lines: GPU 81000 to HCA 1 at distance 6 and to HCA 0 at distance 7, both under level 7 (SYS)
    oracle = {(g, int(h), int(d), int(lv)) for g, h, d, lv in GDR_LINE.findall(text)}
    assert oracle == {("81000", 1, 6, 7), ("81000", 0, 7, 7)}
    got = {(g.gpu, g.hca, g.distance, g.level) for g in log.gdr if g.scope == "gpu"}
    assert got == oracle
    # rank 0 (n013) and rank 1 (n014): every connection of rank 0 is inter-node over NIC 1 with GPUDirect RDMA
    conns = CONN_LINE.findall(text)
    assert len(conns) == 4 and {c[5] for c in conns} == {"1"}
    assert sorted((c.channel, c.src, c.dst, c.direction, c.transport, c.nic) for c in log.connections) == sorted(
        (int(ch), int(s), int(d), {"receive": "recv"}.get(way, way), tr, int(nic)) for ch, s, d, way, tr, nic in conns)
    assert {r.rank: r.host for r in log.ranks} == {0: "n013", 1: "n014"}
    assert all(log.is_inter_node(c.src, c.dst, c.kind) for c in log.connections)
    assert log.rails() == {"n013": {0: [1]}}
    # the graph search found 1 channel per pattern and the communicator runs 2: NCCL's doubling, no cut
    assert [g.nchannels for g in log.graphs] == [1, 1, 0] and log.nchannels() == 2


def test_net003_stays_silent_where_the_gpu_uses_its_closest_nic(tmp_path):
    log = _load(TWO_HCAS, tmp_path)
    assert [f.rule_id for f in findings(log)] == ["NET005"]  # NCCL_NET_GDR_LEVEL=SYS, set by the user


def test_net003_fires_on_the_same_log_with_the_connections_on_the_farther_nic(tmp_path):
    src = tmp_path / "far.log"
    text = TWO_HCAS.read_text()
    assert text.count("via NET/IB/1/GDRDMA") == 4
    src.write_text(text.replace("via NET/IB/1/GDRDMA", "via NET/IB/0/GDRDMA"))
    log = _load(src, tmp_path, "far")
    [f] = [f for f in findings(log) if f.rule_id == "NET003"]
    assert "rank 0 (GPU 81000) uses NIC [0] though NIC [1] is closer (distance 6)" in f.message
    quoted = [e.detail["text"] for e in f.evidence]
    assert quoted and all("GPU Direct RDMA Enabled for GPU 81000 / HCA" in q for q in quoted)


# Where each NET rule has a real case (a corpus log, or a real log above) and a planted one (a real log edited
# at test time), per check; docs/nccl.md carries the same table. A check with no real case names why.
CASES = {
    ("NET001", "sockets between nodes, no RDMA device found"): ("pizdaint-4x1-aries-socket-tree-ll128-2.17.log",
                                                                 "test_net001_planted_fallback_while_ib_nics_exist"),
    ("NET001", "sockets set on purpose (NCCL_IB_DISABLE / NCCL_NET)"): (None, "test_net001_planted_on_purpose_by_env"),
    ("NET002", "GPUDirect off, no module"): ("perlmutter-2x4-roce-ibv_create_cq-fail-2.7.log",
                                              "test_net002_planted_distance_above_level"),
    ("NET003", "GPUs share a NIC while others idle"): ("corigpu-2x8-v100-ib-9nic-wcerr12-2.4.log",
                                                        "test_net003_planted_shared_efa_device"),
    ("NET003", "cross-rail without PXN"): (None, "test_net003_planted_cross_rail_without_pxn"),
    ("NET003", "GPU off its closest NIC"): (None, "test_net003_fires_on_the_same_log_with_the_connections_on_the_farther_nic"),
    ("NET004", "SHM, P2P disabled by env"): ("1x2-smartio-p2pdisabled-shm-allreduce-2.23.log",
                                              "test_net004_planted_shm_where_nvlink_exists"),
    ("NET004", "P2P over PCIe where NVLink exists"): (None, "test_net004_planted_p2p_over_pcie_where_nvlink_exists"),
    ("NET004", "channels far below the graph search"): (None, "test_net004_planted_channels_far_below_the_graph_search"),
    ("NET005", "forced settings"): ("ault-2x2-shm-socket-tree-simple-2.17.log", "test_net005_planted_channel_limit"),
    ("NET006", "failure root cause"): ("corigpu-2node-connect-noroute-2.8.log",
                                       "test_net006_planted_ibv_modify_qp_with_a_peer_that_saw_it"),
    ("NET007", "busbw below the link"): ("2x1-v100-mlx5-roce-allgather-ok-2.5.log",
                                         "test_net007_planted_nvlink_twice_as_fast"),
}


def test_every_net_rule_has_a_real_and_a_planted_case():
    planted_tests = {n for n in dir(rules) if n.startswith("test_")} | set(globals())
    real_rules = {rid for (rid, _), (log, _) in CASES.items() if log is not None}
    assert real_rules == {r.id for r in rules.registry()}  # every rule fires on at least one real log
    for (rid, check), (log, planted) in CASES.items():
        assert planted in planted_tests, (rid, check)
        if log is not None:
            assert rid in rules.CORPUS_CASES[log], (rid, check, log)


def test_the_docs_list_the_same_cases():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "nccl.md").read_text()
    section = docs.split("### Real and planted cases")[1]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| NET")]
    assert {(r[0], r[1]) for r in rows} == set(CASES)
    for r in rows:
        log, planted = CASES[(r[0], r[1])]
        assert (log or "none") in r[2] and planted in r[3]
