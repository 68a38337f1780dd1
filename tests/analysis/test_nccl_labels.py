"""Every real NCCL log of the corpus ingests, and its facts equal what an expert reads from it (corpus/nccl/LABELS.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from analysis.readers.nccl import NcclLog, ingest, load, looks_like_nccl_log
from tests.conftest import corpus_dir

NCCL_DIR = corpus_dir() / "nccl"
LOGS = sorted(NCCL_DIR.glob("*.log"))


def short(name: str) -> Path:
    for path in LOGS:
        if path.name.split("__")[-1] == name:
            return path
    raise FileNotFoundError(name)


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, NcclLog]:
    out = tmp_path_factory.mktemp("nccl")
    loaded = {}
    for path in LOGS:
        db = out / f"{path.stem}.duckdb"
        ingest(path, db)
        loaded[path.name.split("__")[-1]] = load(db)
    return loaded


def transports(log: NcclLog, inter: bool | None = None) -> Counter:
    return Counter(t for p in log.pairs() if inter is None or p.inter_node is inter for t in p.transports)


def test_the_corpus_has_its_sixteen_logs_and_each_is_sniffed_as_nccl():
    assert len(LOGS) == 16
    for path in LOGS:
        with path.open("rb") as fh:
            assert looks_like_nccl_log(fh.read(64 * 1024)), path.name
    assert "NCCL" in (NCCL_DIR / "LABELS.md").read_text()


def test_every_log_round_trips_to_json(logs):
    import json
    for name, log in logs.items():
        text = json.dumps(log.path().to_json())  # JSON-safe: no NaN, no objects
        assert "NaN" not in text and "Infinity" not in text, name
        assert log.version is not None, name


def test_p5_efa_nvls(logs):
    log = logs["p5-2x8-h100-efa-nvls-allreduce-2.22.log"]
    assert log.version == "2.22.3"
    assert log.nodes() == ["test-nccl-worker-0", "test-nccl-worker-1"]
    assert len(log.ranks) == 16 and {r.gpu for r in log.ranks} == {"NVIDIA H100 80GB HBM3"}
    assert log.providers() == {"efa": 32} and set(log.networks) == {"AWS Libfabric"}
    assert transports(log, inter=False).keys() == {"P2P/CUMEM"}
    inter = [p for p in log.pairs() if p.inter_node]
    # rail-aligned: rank i <-> i+8 over NET/AWS Libfabric/i/GDRDMA, GDR on
    assert sorted((p.src, p.dst) for p in inter) == sorted([(i, i + 8) for i in range(8)] + [(i + 8, i) for i in range(8)])
    for p in inter:
        assert p.transports == (f"NET/AWS Libfabric/{min(p.src, p.dst)}/GDRDMA",) and p.gdr is True
    assert {n.kind for n in log.nics} == {"EFA"}
    assert log.channel_counts["coll"] == 16 and log.channel_counts["nvls"] == 16
    assert log.nvls.get("connected") == 1
    assert log.rings[0].ranks == (0, 7, 6, 5, 4, 3, 2, 1, 9, 10, 11, 12, 13, 14, 15, 8)
    cross = {(t.rank, u) for t in log.trees for u in (*t.down, t.up) if u is not None
             and (t.rank < 8) != (u < 8)}
    assert cross and all(abs(a - b) == 8 for a, b in cross)  # cross-node tree edges are i <-> i+8
    env = {e.name: (e.value, e.set_by) for e in log.env}
    assert env["NCCL_BUFFSIZE"][0] == "8388608"
    assert env["NCCL_NVLS_CHUNKSIZE"] == ("524288", "net plugin")
    assert env["NCCL_NET_FORCE_FLUSH"] == ("0", "net plugin")
    assert env["NCCL_TOPO_FILE"][0].endswith("p5.48xl-topo.xml")
    assert not log.warnings
    bw = log.tests
    assert (bw.peak_busbw, bw.peak_busbw_in_place, bw.peak_size) == (487.9, 488.14, 16 * 2**30)
    assert bw.avg_busbw == pytest.approx(124.584)
    assert len(log.tests.rows) == 32  # 8 B .. 16 GB, the rows mpirun cut with [1,0]<stdout>: tags joined


def test_a100_pcie_nvlink_bridge(logs):
    log = logs["1x2-a100pcie-nvlbridge-allreduce-2.27.log"]
    assert log.version == "2.27.7" and log.nodes() == ["mew0"]
    assert [(r.rank, r.bus_id, r.gpu) for r in log.ranks] == [(0, "17000", "NVIDIA A100 80GB PCIe"),
                                                             (1, "65000", "NVIDIA A100 80GB PCIe")]
    assert {(p.src, p.dst, p.transports) for p in log.pairs()} == {(0, 1, ("P2P/direct pointer/read",)),
                                                                  (1, 0, ("P2P/direct pointer/read",))}
    assert log.topo_links["NVL"]["max_bw"] == 240.0 and log.topo_links["PCI"]["max_bw"] == 24.0
    assert log.nchannels() == 24 and all(r.ranks == (0, 1) for r in log.rings) and len(log.rings) == 24
    roots = {t.channel: t.rank for t in log.trees if t.up is None}
    assert roots == {c: (0 if c in (*range(6), *range(12, 18)) else 1) for c in range(24)}
    real = {(n.name, n.kind, n.speed_mbps) for n in log.nics if not n.virtual}
    assert real == {("mlx5_0", "RoCE", 100000), ("mlx5_1", "RoCE", 100000)}
    assert {(n.name, n.speed_mbps) for n in log.nics if n.virtual} == {("mlx5_0+mlx5_1", 200000)}
    assert log.gdr and not any(g.enabled for g in log.gdr)
    calls = {(a.coll, a.bytes, a.algo, a.proto, a.channels) for a in log.algo_calls}
    assert calls == {("AllReduce", 8 * 2**20 * 2**k, "Ring", "Simple", 24) for k in range(11)}
    assert not log.warnings
    bw = log.tests
    # LABELS.md reads the table as out-of-place only and names 216.61: it is the larger column, which the
    # header calls in-place; out-of-place peaks at 216.60 on the same 8 GB row.
    assert (bw.peak_busbw, bw.peak_busbw_in_place, bw.peak_size) == (216.60, 216.61, 8 * 2**30)
    assert bw.avg_busbw == pytest.approx(178.078)


def test_ault_shm_and_socket_tree_simple(logs):
    log = logs["ault-2x2-shm-socket-tree-simple-2.17.log"]
    assert log.nodes() == ["ault43", "ault44"]
    assert {r.bus_id for r in log.ranks} == {"41000", "81000"} and len(log.ranks) == 4
    assert {(p.src, p.dst) for p in log.pairs() if p.transports == ("SHM/direct/direct",)} == {(0, 1), (1, 0), (2, 3),
                                                                                              (3, 2)}
    inter = [p for p in log.pairs() if p.inter_node]
    assert inter and all(p.transports == ("NET/Socket/0",) for p in inter)
    assert {n.name for n in log.nics} == {"enp225s0f1"} and {n.kind for n in log.nics} == {"socket"}
    assert any(g.type == "SYS/SYS" for g in log.graphs)
    assert log.nchannels() == 2 and [r.ranks for r in log.rings] == [(0, 1, 2, 3)] * 2
    tree0 = next(t for t in log.trees if t.channel == 0 and t.rank == 0)
    assert (tree0.up, tree0.down) == (None, (1, 2))  # "Trees [0] 1/2/-1->0->-1"
    assert log.env_value("NCCL_ALGO") == "Tree" and log.env_value("NCCL_PROTO") == "Simple"
    assert not log.warnings


def test_piz_daint_aries_sockets(logs):
    log = logs["pizdaint-4x1-aries-socket-tree-ll128-2.17.log"]
    assert log.nodes() == ["nid03092", "nid03093", "nid03094", "nid03095"]
    assert {r.bus_id for r in log.ranks} == {"2000"}
    assert any(n.kind == "no_device" and n.what == "IB" for n in log.net_notes)
    assert {(n.name, n.kind) for n in log.nics} == {("ipogif0", "socket")}
    assert log.pairs() and all(p.transports == ("NET/Socket/0",) and p.inter_node for p in log.pairs())
    assert log.nchannels() == 2 and [r.ranks for r in log.rings] == [(0, 1, 2, 3)] * 2
    t = {(x.channel, x.rank): (x.up, x.down) for x in log.trees}
    assert t[(0, 0)] == (None, (2,)) and t[(1, 0)] == (1, ())  # "[0] 2/-1/-1->0->-1 [1] -1/-1/-1->0->1"
    assert log.env_value("NCCL_ALGO") == "Tree" and log.env_value("NCCL_PROTO") == "LL128"
    assert any(g.type == "LOC/PHB" for g in log.graphs)
    assert not log.warnings and not log.failures


def test_nvswitch_alltoall_coll_trace(logs):
    log = logs["1x3-a100-p2pdirect-coll-alltoall-2.7.log"]
    assert log.version == "2.7.3" and len(log.nodes()) == 1
    assert {r.gpu for r in log.ranks} == {"NVIDIA A100-SXM4-80GB"} and len(log.ranks) == 3
    assert len(log.pairs()) == 6 and transports(log).keys() == {"P2P/direct pointer/read"}
    assert log.topo_links["NVL"]["max_bw"] == 252.0 and "NVS/0" in log.topo_links["NVL"]["targets"]
    assert log.channel_counts["coll"] == 24 and log.channel_counts["p2p"] == 32
    assert all(r.ranks == (0, 1, 2) for r in log.rings)
    assert any(g.nchannels == 12 and g.type == "NVL/PIX" for g in log.graphs)
    assert [w.kind for w in log.warnings] == ["no_ibverbs"] and set(log.networks) == {"Socket"}
    bw = log.tests
    # the label's 233.73 is the in-place column of the split rows (out-of-place peaks at 204.8)
    assert max(bw.peak_busbw, bw.peak_busbw_in_place) == 233.73
    assert bw.avg_busbw == pytest.approx(60.3942)


def test_polaris_coll_and_tuning_only(logs):
    log = logs["polaris-1x4-coll-tuning-trace-2.20.log"]
    assert log.version == "2.20.5" and log.nodes() == ["x3005c0s7b0n0"]
    assert not log.connections and not log.rings and not log.trees and not log.ranks
    calls = {(a.bytes, a.algo, a.proto) for a in log.algo_calls}
    assert (2097152, "Ring", "Simple") in calls and (1, "Ring", "LL") in calls
    tuning = {(t.coll, t.algo, t.proto): (t.latency_us, t.bw_gbs) for t in log.tuning}
    assert tuning[("AllReduce", "Ring", "Simple")] == (28.8, 160.0)
    assert tuning[("AllReduce", "Tree", "Simple")] == (168.0, 110.4)
    assert tuning[("AllReduce", "NVLS", "Simple")] == (0.0, 0.0)
    assert tuning[("AllReduce", "CollNetDirect", "Simple")][1] == 0.0
    assert log.path().to_json()["pairs"] == []


def test_snellius_h100_nvlink(logs):
    log = logs["snellius-1x4-h100-p2pdirect-allreduce-2.22.log"]
    assert log.nodes() == ["gcn155"] and len(log.ranks) == 4
    assert len(log.pairs()) == 12 and transports(log).keys() == {"P2P/direct pointer"}
    assert log.nvls.get("unavailable") == 4 and not log.nvls.get("available")
    assert log.nchannels() == 24 and len({r.ranks for r in log.rings}) > 1  # permuted rings
    assert sorted((n.name, n.kind) for n in log.nics) == [("mlx5_0", "RoCE"), ("mlx5_2", "IB"), ("mlx5_3", "IB"),
                                                          ("mlx5_4", "IB"), ("mlx5_5", "IB")]
    bw = log.tests
    assert (bw.peak_busbw, bw.peak_busbw_in_place, bw.peak_size) == (323.99, 324.76, 128 * 2**20)
    assert bw.avg_busbw == pytest.approx(67.3623)
    assert not log.warnings


def test_cori_bootstrap_no_route(logs):
    log = logs["corigpu-2node-connect-noroute-2.8.log"]
    assert log.version == "2.8.3" and log.nodes() == ["cgpu08", "cgpu14"]
    assert {r.host for r in log.ranks if r.rank >= 4} == {"cgpu14"} and len(log.ranks) == 8
    assert not log.connections and not log.rings and not log.trees
    assert {n.name for n in log.nics} == {f"mlx5_{i}" for i in range(8)}
    assert {n.kind for n in log.nics if n.name == "mlx5_3"} == {"RoCE"}
    assert log.oob["cgpu08"].startswith("ib0:192.168.184.61")
    assert [(w.kind, w.rank, w.host) for w in log.warnings] == [("no_route", r, "cgpu14") for r in (4, 5, 6, 7)]
    assert "192.168.184.61<42427>" in log.warnings[0].message
    assert any(f.kind == "Segmentation fault" for f in log.failures)


@pytest.mark.parametrize("name, net, version", [("perlmutter-2x4-roce-ibv_create_cq-fail-2.7.log", "IB", "2.7.8"),
                                                ("perlmutter-2x4-ibext-ibv_create_cq-fail-2.9.log", "IBext", "2.9.8")])
def test_perlmutter_ibv_create_cq(logs, name, net, version):
    log = logs[name]
    assert log.version == version and log.nodes() == ["nid001028", "nid001029"]
    assert len(log.ranks) == 8 and {r.host for r in log.ranks if r.rank < 4} == {"nid001028"}
    assert {(n.name, n.kind) for n in log.nics} == {("mlx5_0", "RoCE"), ("mlx5_1", "RoCE")}
    assert transports(log, inter=False).keys() == {"P2P/IPC/read"}
    inter = {(p.src, p.dst) for p in log.pairs() if p.inter_node}
    assert {(3, 4), (7, 0)} <= inter
    assert all(t.startswith(f"NET/{net}/") for p in log.pairs() if p.inter_node for t in p.transports)
    assert log.nchannels() == 4 and all(r.ranks == tuple(range(8)) for r in log.rings)
    first = [w for w in log.warnings if w.kind == "ibv_create_cq"]
    assert {w.rank for w in first} == {3, 7}
    assert {w.rank for w in log.warnings if w.kind == "connection_closed"} == {0, 4}
    assert any("unhandled system error" in f.text for f in log.failures)
    if net == "IBext":
        assert set(log.networks) == {"IBext"}
        assert any("NCCL version 20.9.8" in f.text for f in log.failures)  # normalized to 2.9.8 above


def test_podman_ofi_registration_failure(logs):
    log = logs["perlmutter-2x4-podman-ofi-regmr-fail-2.21.log"]
    assert log.version == "2.21.5" and log.nodes() == ["nid003981", "nid004048"]
    assert {r.gpu for r in log.ranks} == {"NVIDIA A100-SXM4-40GB"} and len(log.ranks) == 8
    assert log.providers() == {"cxi": 8} and {n.kind for n in log.nics} == {"CXI"}
    assert transports(log, inter=False).keys() == {"P2P/CUMEM/read"}
    nic_of = {p.src: p.nics for p in log.pairs() if p.inter_node and p.src < 4}
    assert nic_of == {0: (7,), 1: (5,), 2: (3,), 3: (1,)}  # GPU0<->NIC 7, GPU1<->5, GPU2<->3, GPU3<->1
    assert all(p.gdr for p in log.pairs() if p.inter_node)
    assert log.nchannels() == 8
    assert log.warning_counts == {"mr_registration": 32}
    devices = {w.message.split("for device ")[1][0] for w in log.warnings}
    assert devices == {"1", "3", "5", "7"}
    assert any("unhandled system error" in f.text for f in log.failures)
    assert not log.tests.rows


def test_cori_2x8_ib_nine_nics_completion_error(logs):
    log = logs["corigpu-2x8-v100-ib-9nic-wcerr12-2.4.log"]
    assert log.version == "2.4.8" and log.nodes() == ["cgpu08", "cgpu09"] and len(log.ranks) == 16
    nics = {(n.index, n.name, n.kind) for n in log.nics if n.host == "cgpu08"}
    assert nics == {(0, "mlx5_0", "IB"), (1, "mlx5_2", "IB"), (2, "mlx5_4", "IB"), (3, "mlx5_6", "IB"),
                    (4, "mlx4_0", "RoCE"), (5, "mlx5_1", "IB"), (6, "mlx5_3", "RoCE"), (7, "mlx5_5", "IB"),
                    (8, "mlx5_7", "IB")}
    assert transports(log, inter=False).keys() == {"P2P/IPC"}
    nic_of_gpu = {}
    for p in log.pairs():
        if p.inter_node and p.src < 8:
            nic_of_gpu.setdefault(p.src, set()).update(p.nics)
    assert nic_of_gpu == {0: {0}, 1: {0}, 2: {6}, 3: {6}, 4: {2}, 5: {2}, 6: {8}, 7: {8}}
    assert all(p.gdr is False for p in log.pairs() if p.inter_node)
    assert all(not g.enabled and "no module" in (g.reason or "") for g in log.gdr)
    # 12 channels; the Channel 09 ring line is cut by interleaving ("CL INFO Channel 09"), the rest parse
    assert log.nchannels() == 12 and sorted(r.channel for r in log.rings) == [c for c in range(12) if c != 9]
    assert log.rings[0].ranks == (0, 2, 3, 7, 4, 6, 5, 1, 8, 10, 11, 15, 12, 14, 13, 9)
    t = next(x for x in log.trees if x.channel == 0 and x.rank == 7)
    assert (t.up, t.down) == (3, (4,))  # 2.4 syntax "Trees [0] 3->7->4/-1/-1": up -> me -> down
    [w] = log.warnings
    assert (w.kind, w.rank, w.host, w.dev) == ("wc_error", 10, "cgpu09", 0)  # printed by the proxy thread: [0]
    assert "error 12" in w.message
    assert log.path().to_json()["warnings"][0]["nic"] == "NET/IB/6 = mlx5_3 (RoCE)"  # rank 10's cross-node NIC
    assert any("DUE TO TIME LIMIT" in f.text for f in log.failures)


def test_v100_roce_allgather_25_layout(logs):
    log = logs["2x1-v100-mlx5-roce-allgather-ok-2.5.log"]
    assert log.version == "2.5.7" and log.nodes() == ["s95", "s96"]
    assert {(p.src, p.dst, p.transports, p.gdr) for p in log.pairs()} == {(0, 1, ("NET/IB/0",), False),
                                                                          (1, 0, ("NET/IB/0",), False)}
    assert {(n.name, n.kind) for n in log.nics} == {("mlx5_0", "RoCE")}
    assert not log.rings and not log.trees
    reasons = {(g.scope, g.reason) for g in log.gdr}
    assert ("hca", "no module") in reasons and ("gpu", "distance 4 >= 2") in reasons
    assert log.tests.layout == "classic" and all(r.redop is None for r in log.tests.rows)
    bw = log.tests
    assert (bw.peak_busbw, bw.peak_busbw_in_place) == (0.79, 0.95)
    assert 256 * 2**20 <= bw.peak_size <= 2**30
    assert bw.avg_busbw == pytest.approx(0.372466)
    assert not any(n.speed_mbps for n in log.nics)


def test_a100_pcie_p2p_ipc(logs):
    log = logs["1x2-a100pcie-p2pipc-allreduce-2.16.log"]
    assert log.nodes() == ["n013"] and [r.bus_id for r in log.ranks] == ["1000", "81000"]
    assert {(p.src, p.dst, p.transports) for p in log.pairs()} == {(0, 1, ("P2P/IPC",)), (1, 0, ("P2P/IPC",))}
    assert log.nchannels() == 4
    assert {n.name for n in log.nics} == {"mlx5_2"} and log.env_value("NCCL_NET_GDR_LEVEL") == "SYS"
    bw = log.tests
    assert bw.peak_busbw == 14.79 and bw.avg_busbw == pytest.approx(14.4075)
    assert not log.warnings


def test_smartio_p2p_disabled_shm(logs):
    log = logs["1x2-smartio-p2pdisabled-shm-allreduce-2.23.log"]
    assert log.version == "2.23.4" and log.nodes() == ["n015"]
    assert [r.bus_id for r in log.ranks] == ["a10b0", "a10c0"]
    assert log.env_value("NCCL_P2P_DISABLE") == "1"
    assert {(p.src, p.dst, p.transports) for p in log.pairs()} == {(0, 1, ("SHM/direct/direct",)),
                                                                  (1, 0, ("SHM/direct/direct",))}
    assert log.nchannels() == 4
    assert {(n.name, n.kind) for n in log.nics} == {("mlx5_0", "RoCE"), ("mlx5_2", "IB")}
    assert all(g.enabled for g in log.gdr if g.scope == "hca") and len([g for g in log.gdr if g.scope == "hca"]) == 2
    bw = log.tests
    assert bw.peak_busbw == 4.24 and bw.avg_busbw == pytest.approx(3.90833)


def test_a100_pcie_ib_gdr_forced_on(logs):
    log = logs["2x1-a100pcie-ib-gdr-on-allreduce-2.16.log"]
    assert log.nodes() == ["n013", "n014"] and {r.bus_id for r in log.ranks} == {"81000"}
    assert {(n.name, n.kind) for n in log.nics} == {("mlx5_2", "IB")}
    assert log.oob["n013"].startswith("ibp209s0f0")
    assert log.env_value("NCCL_NET_GDR_LEVEL") == "SYS"
    g = next(g for g in log.gdr if g.scope == "gpu")
    assert (g.gpu, g.hca, g.enabled, g.distance, g.op, g.level) == ("81000", 0, True, 6, "<=", 7)
    nic = next(n for n in log.path().to_json()["nics"] if n["host"] == "n013")
    assert {(x["gpu"], x["enabled"], x["distance"], x["level"]) for x in nic["gdr"] if x["scope"] == "gpu"} == {
        ("81000", True, 6, 7)}  # GDR per GPU on this NIC, with the distance that decided it
    assert {(p.src, p.dst, p.transports, p.gdr) for p in log.pairs()} == {(0, 1, ("NET/IB/0/GDRDMA",), True),
                                                                          (1, 0, ("NET/IB/0/GDRDMA",), True)}
    assert log.nchannels() == 2 and [r.ranks for r in log.rings] == [(0, 1)] * 2
    bw = log.tests
    assert bw.peak_busbw == 14.74 and bw.avg_busbw == pytest.approx(11.4804)
    assert 2.1e9 < bw.peak_size < 2.2e9  # "about 2.1 GB message"
    assert not log.warnings
