"""The NET rules: each fires on a real corpus log and on a real log edited at test time (planted), stays silent on
clean ones, and quotes the log lines it stands on (line number and text as found)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.diagnosis.nccl import findings, registry, verdict
from analysis.diagnosis.rules.base import ThresholdError
from analysis.readers.nccl import NcclLog, ingest, load
from analysis.results import FindingResult
from tests.conftest import corpus_dir

NCCL_DIR = corpus_dir() / "nccl"
LOGS = sorted(NCCL_DIR.glob("*.log"))

GDR_ON = "2x1-a100pcie-ib-gdr-on-allreduce-2.16.log"
P5 = "p5-2x8-h100-efa-nvls-allreduce-2.22.log"
NVL_BRIDGE = "1x2-a100pcie-nvlbridge-allreduce-2.27.log"
SNELLIUS = "snellius-1x4-h100-p2pdirect-allreduce-2.22.log"
CORI_24 = "corigpu-2x8-v100-ib-9nic-wcerr12-2.4.log"


def path_of(name: str) -> Path:
    for path in LOGS:
        if path.name.split("__")[-1] == name:
            return path
    raise FileNotFoundError(name)


def planted(tmp_path: Path, name: str, replace: tuple[tuple[str, str], ...] = (),
            insert_after: tuple[tuple[str, str], ...] = ()) -> tuple[NcclLog, Path]:
    """A corpus log edited as a person would (every edit must apply), ingested and loaded."""
    text = path_of(name).read_text(encoding="utf-8", errors="replace")
    for old, new in replace:
        assert old in text, f"{old!r} not in {name}"
        text = text.replace(old, new)
    lines = text.split("\n")
    for anchor, new_line in insert_after:
        at = next(i for i, line in enumerate(lines) if anchor in line)
        lines.insert(at + 1, new_line)
    src = tmp_path / f"planted-{name}"
    src.write_text("\n".join(lines), encoding="utf-8")
    db = tmp_path / f"planted-{name}.duckdb"
    ingest(src, db)
    return load(db), src


_CACHE: dict[str, NcclLog] = {}


def real(name: str, tmp_path_factory) -> NcclLog:
    if name not in _CACHE:
        db = tmp_path_factory.mktemp("nccl-real") / "log.duckdb"
        ingest(path_of(name), db)
        _CACHE[name] = load(db)
    return _CACHE[name]


def by_rule(log: NcclLog, rule_id: str):
    """The rule's findings on the log as a result holds them (``extra``: the JSON keys)."""
    return [FindingResult.from_json(f.to_dict()) for f in findings(log) if f.rule_id == rule_id]


def assert_quotes_its_lines(finding, src: Path) -> None:
    """Every evidence item that quotes a line quotes it as it stands at that line number."""
    lines = src.read_text(encoding="utf-8", errors="replace").split("\n")
    quoted = [e for e in finding.evidence if e.detail.get("line") and not e.detail.get("derived")]
    assert quoted, finding.rule_id
    for e in quoted:
        assert e.detail["text"] in lines[e.detail["line"] - 1], (e.detail, lines[e.detail["line"] - 1])


# ------------------------------------------------------------------------------------------------ registry
def test_registry_lists_seven_documented_rules_with_bounded_thresholds():
    rules = list(registry())
    assert [r.id for r in rules] == [f"NET00{i}" for i in range(1, 8)]
    for rule in rules:
        doc = rule.doc()
        assert "*Why it matters*" in doc and "*How it is detected*" in doc and "*Advice*" in doc, rule.id
        for t in rule.thresholds.values():
            assert t.minimum is not None and t.maximum is not None and t.unit


def test_thresholds_are_checked_and_applied(tmp_path_factory):
    log = real("ault-2x2-shm-socket-tree-simple-2.17.log", tmp_path_factory)
    assert [f.rule_id for f in findings(log)][0] == "NET001"
    assert "NET001" not in {f.rule_id for f in findings(log, {"NET001.min_pairs": 100})}
    with pytest.raises(ThresholdError):
        findings(log, {"NET001.no_such": 1})
    assert findings(log, {"GPU001.min_gap_us": 5}) == findings(log)  # another tool's overrides are not ours
    with pytest.raises(ThresholdError):
        findings(log, {"NET004.min_channel_share_pct": 500})


# ------------------------------------------------------------------------------------------------ NET001
def test_net001_real_sockets_because_no_rdma_device(tmp_path_factory):
    for name in ("ault-2x2-shm-socket-tree-simple-2.17.log", "pizdaint-4x1-aries-socket-tree-ll128-2.17.log"):
        log = real(name, tmp_path_factory)
        [f] = by_rule(log, "NET001")
        assert f.severity == "critical" and "found no RDMA device" in f.message
        assert_quotes_its_lines(f, path_of(name))
        assert "socket" in (verdict(log) or "").lower()


def test_net001_planted_fallback_while_ib_nics_exist(tmp_path):
    log, src = planted(tmp_path, GDR_ON, replace=(("via NET/IB/0/GDRDMA", "via NET/Socket/0"),))
    [f] = by_rule(log, "NET001")
    assert f.severity == "critical" and "mlx5_2 (IB)" in f.message and f.evidence_total == 2
    assert_quotes_its_lines(f, src)


def test_net001_planted_on_purpose_by_env(tmp_path):
    log, src = planted(tmp_path, GDR_ON, replace=(("via NET/IB/0/GDRDMA", "via NET/Socket/0"),),
                       insert_after=(("NCCL_NET_GDR_LEVEL set by environment",
                                      "n013:445255:445265 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1."),))
    [f] = by_rule(log, "NET001")
    assert f.severity == "warning" and "on purpose" in f.message and f.extra["nccl"]["on_purpose"] is True
    assert_quotes_its_lines(f, src)


@pytest.mark.parametrize("name", [GDR_ON, P5, NVL_BRIDGE])
def test_net001_silent_on_rdma_or_single_node(name, tmp_path_factory):
    assert not by_rule(real(name, tmp_path_factory), "NET001")


# ------------------------------------------------------------------------------------------------ NET002
def test_net002_real_gdr_off_no_module(tmp_path_factory):
    log = real(CORI_24, tmp_path_factory)
    [f] = by_rule(log, "NET002")
    assert f.evidence_total == 16 and "kernel module" in f.message
    assert_quotes_its_lines(f, path_of(CORI_24))
    log = real("2x1-v100-mlx5-roce-allgather-ok-2.5.log", tmp_path_factory)
    [f] = by_rule(log, "NET002")
    assert "distance 4 is above the GDR level 2" in f.message and "0.79 GB/s" in f.message


def test_net002_planted_distance_above_level(tmp_path):
    log, src = planted(tmp_path, GDR_ON, replace=(
        ("via NET/IB/0/GDRDMA", "via NET/IB/0"),
        ("GPU Direct RDMA Enabled for GPU 81000 / HCA 0 (distance 6 <= 7)",
         "GPU Direct RDMA Disabled for GPU 81000 / HCA 0 (distance 6 > 5)")))
    [f] = by_rule(log, "NET002")
    assert "distance 6 is above the GDR level 5" in f.message and "14.74 GB/s" in f.message
    assert_quotes_its_lines(f, src)


@pytest.mark.parametrize("name", [GDR_ON, P5, "ault-2x2-shm-socket-tree-simple-2.17.log"])
def test_net002_silent_with_gdr_or_sockets(name, tmp_path_factory):
    assert not by_rule(real(name, tmp_path_factory), "NET002")


# ------------------------------------------------------------------------------------------------ NET003
def test_net003_real_gpus_share_nics_while_others_idle(tmp_path_factory):
    log = real(CORI_24, tmp_path_factory)
    [f] = by_rule(log, "NET003")
    assert "ranks [0, 1] share mlx5_0 (IB)" in f.message and "ranks [2, 3] share mlx5_3 (RoCE)" in f.message
    assert "5 RDMA NIC(s) carry nothing" in f.message
    assert_quotes_its_lines(f, path_of(CORI_24))


def test_net003_planted_shared_efa_device(tmp_path):
    log, src = planted(tmp_path, P5, replace=(("NET/AWS Libfabric/1/GDRDMA", "NET/AWS Libfabric/0/GDRDMA"),))
    [f] = by_rule(log, "NET003")
    assert "ranks [0, 1] share" in f.message and "ranks [8, 9] share" in f.message
    assert_quotes_its_lines(f, src)


def test_net003_planted_cross_rail_without_pxn(tmp_path):
    log, src = planted(tmp_path, P5, replace=(("9[1] -> 1[1] [receive] via NET/AWS Libfabric/1/",
                                              "9[1] -> 1[1] [receive] via NET/AWS Libfabric/3/"),))
    [f] = by_rule(log, "NET003")
    assert "without PXN" in f.message and "NIC 1 -> NIC 3" in f.message
    assert_quotes_its_lines(f, src)


@pytest.mark.parametrize("name", [P5, "perlmutter-2x4-podman-ofi-regmr-fail-2.21.log", GDR_ON])
def test_net003_silent_on_rail_aligned_runs(name, tmp_path_factory):
    assert not by_rule(real(name, tmp_path_factory), "NET003")


# ------------------------------------------------------------------------------------------------ NET004
def test_net004_real_p2p_disabled_by_env(tmp_path_factory):
    name = "1x2-smartio-p2pdisabled-shm-allreduce-2.23.log"
    log = real(name, tmp_path_factory)
    [f] = by_rule(log, "NET004")
    assert f.severity == "warning" and "NCCL_P2P_DISABLE=1" in f.message
    assert_quotes_its_lines(f, path_of(name))
    assert "SHM" in (verdict(log) or "")


def test_net004_real_shm_because_p2p_could_not_be_enabled(tmp_path_factory):
    log = real("ault-2x2-shm-socket-tree-simple-2.17.log", tmp_path_factory)
    [f] = by_rule(log, "NET004")
    assert f.severity == "info" and "could not enable P2P" in f.message


def test_net004_planted_shm_where_nvlink_exists(tmp_path):
    log, src = planted(tmp_path, NVL_BRIDGE, replace=(("via P2P/direct pointer/read", "via SHM/direct/direct"),))
    [f] = by_rule(log, "NET004")
    assert f.severity == "warning" and "NVLink joins these GPUs" in f.message
    assert_quotes_its_lines(f, src)


@pytest.mark.parametrize("name", [NVL_BRIDGE, SNELLIUS, "1x3-a100-p2pdirect-coll-alltoall-2.7.log"])
def test_net004_silent_on_p2p_over_nvlink(name, tmp_path_factory):
    assert not by_rule(real(name, tmp_path_factory), "NET004")


# ------------------------------------------------------------------------------------------------ NET005
def test_net005_real_forced_algo_and_proto(tmp_path_factory):
    name = "ault-2x2-shm-socket-tree-simple-2.17.log"
    [f] = by_rule(real(name, tmp_path_factory), "NET005")
    assert f.extra["nccl"]["settings"] == {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}  # dump files left out
    assert_quotes_its_lines(f, path_of(name))
    [f] = by_rule(real(P5, tmp_path_factory), "NET005")
    assert "NCCL_NVLS_CHUNKSIZE=524288 (net plugin)" in f.message


def test_net005_planted_channel_limit(tmp_path):
    log, src = planted(tmp_path, SNELLIUS, insert_after=(
        ("NCCL_SOCKET_IFNAME set by environment",
         "gcn155:1539421:1539421 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 2."),))
    [f] = by_rule(log, "NET005")
    assert f.extra["nccl"]["settings"]["NCCL_MAX_NCHANNELS"] == "2"
    assert_quotes_its_lines(f, src)


def test_net005_silent_when_only_diagnostics_are_set(tmp_path_factory):
    assert not by_rule(real(NVL_BRIDGE, tmp_path_factory), "NET005")  # NCCL_TOPO_DUMP_FILE only


# ------------------------------------------------------------------------------------------------ NET006
@pytest.mark.parametrize("name, kind, ranks, nic, peers", [
    (CORI_24, "wc_error", [10], "mlx5_3 (RoCE)", []),
    ("perlmutter-2x4-roce-ibv_create_cq-fail-2.7.log", "ibv_create_cq", [3, 7], "mlx5_1 (RoCE)", [0, 4]),
    ("perlmutter-2x4-ibext-ibv_create_cq-fail-2.9.log", "ibv_create_cq", [3, 7], "mlx5_", [0, 4]),
    ("corigpu-2node-connect-noroute-2.8.log", "no_route", [4, 5, 6, 7], None, []),
    ("perlmutter-2x4-podman-ofi-regmr-fail-2.21.log", "mr_registration", list(range(8)), "AWS Libfabric", []),
])
def test_net006_real_failures_reduced_to_root_cause(name, kind, ranks, nic, peers, tmp_path_factory):
    log = real(name, tmp_path_factory)
    [f] = by_rule(log, "NET006")
    x = f.extra["nccl"]
    assert (f.severity, x["root_kind"], x["failing_ranks"], x["peers"]) == ("critical", kind, ranks, peers)
    assert x["root_line"] == min(w.line for w in log.warnings if w.kind == kind)
    if nic:
        assert nic in (x["nic"] or "")
    assert_quotes_its_lines(f, path_of(name))
    assert verdict(log).startswith("Failure root cause")


def test_net006_meanings_name_the_mechanism(tmp_path_factory):
    f = by_rule(real(CORI_24, tmp_path_factory), "NET006")[0]
    assert "IBV_WC_RETRY_EXC_ERR" in f.message and "TIME LIMIT" in f.message
    f = by_rule(real("perlmutter-2x4-podman-ofi-regmr-fail-2.21.log", tmp_path_factory), "NET006")[0]
    assert "GPUDirect RDMA is unusable" in f.message and "container" in f.message
    f = by_rule(real("corigpu-2node-connect-noroute-2.8.log", tmp_path_factory), "NET006")[0]
    assert "out-of-band" in f.message


def test_net006_planted_ibv_modify_qp_with_a_peer_that_saw_it(tmp_path):
    log, src = planted(tmp_path, GDR_ON, insert_after=(
        ("n014:174600:174609 [0] NCCL INFO Channel 01/0 : 1[81000] -> 0[81000] [send] via NET/IB/0/GDRDMA",
         "n014:174600:174609 [0] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error Connection "
         "timed out"),
        ("n013:445255:445265 [0] NCCL INFO Channel 01/0 : 0[81000] -> 1[81000] [send] via NET/IB/0/GDRDMA",
         "n013:445255:445265 [0] include/socket.h:416 NCCL WARN Net : Connection closed by remote peer"),
    ))
    [f] = by_rule(log, "NET006")
    x = f.extra["nccl"]
    assert (x["root_kind"], x["root_rank"], x["peers"]) == ("ibv_modify_qp", 1, [0])
    assert "mlx5_2 (IB)" in x["nic"] and "NIC or its driver" in f.message
    assert_quotes_its_lines(f, src)


@pytest.mark.parametrize("name", ["1x3-a100-p2pdirect-coll-alltoall-2.7.log", GDR_ON, P5])
def test_net006_silent_without_a_failure(name, tmp_path_factory):
    # the alltoall log has a WARN (libibverbs missing) but the run succeeded
    assert not by_rule(real(name, tmp_path_factory), "NET006")


# ------------------------------------------------------------------------------------------------ NET007
def test_net007_real_busbw_below_any_rdma_port(tmp_path_factory):
    [f] = by_rule(real("2x1-v100-mlx5-roce-allgather-ok-2.5.log", tmp_path_factory), "NET007")
    assert f.extra["nccl"]["peak_busbw"] == 0.95 and f.extra["nccl"]["link_printed"] is False


def test_net007_planted_nvlink_twice_as_fast(tmp_path):
    log, _src = planted(tmp_path, NVL_BRIDGE, replace=(("NVL[240.0]", "NVL[480.0]"),))
    [f] = by_rule(log, "NET007")
    assert f.extra["nccl"]["link_gbs"] == 480.0 and "45 %" in f.message


@pytest.mark.parametrize("name", [NVL_BRIDGE, GDR_ON, P5])
def test_net007_silent_near_the_link(name, tmp_path_factory):
    assert not by_rule(real(name, tmp_path_factory), "NET007")


# ------------------------------------------------------------------------------------------------ verdict
def test_verdict_is_none_on_a_clean_run_and_names_the_largest_problem(tmp_path_factory):
    assert verdict(real(P5, tmp_path_factory)) is None
    assert verdict(real(GDR_ON, tmp_path_factory)) is None
    v = verdict(real("2x1-v100-mlx5-roce-allgather-ok-2.5.log", tmp_path_factory))
    assert v is not None and v.startswith("GPUDirect RDMA off")


def test_findings_are_json_safe(tmp_path_factory):
    import json

    from analysis.diagnosis.findings import unrepresentable
    for path in LOGS:
        log = real(path.name.split("__")[-1], tmp_path_factory)
        for f in findings(log):
            d = f.to_dict()
            assert unrepresentable(d) is None
            json.dumps(d)


def test_net003_pxn_forwarding_is_not_cross_rail(tmp_path):
    # PXN: rank 1 receives through rank 3's NIC ("3(3)"): the proxy owns that rail, nothing crosses rails
    log, _src = planted(tmp_path, P5, replace=(("9[1] -> 1[1] [receive] via NET/AWS Libfabric/1/",
                                               "9[1] -> 1[1] [receive] via NET/AWS Libfabric/3(3)/"),))
    assert any(p.proxy_ranks == (3,) for p in log.pairs())
    assert log.rails()["test-nccl-worker-0"][3] == [3]
    assert not by_rule(log, "NET003")


def test_net004_planted_channels_far_below_the_graph_search(tmp_path):
    log, _src = planted(tmp_path, NVL_BRIDGE, replace=(("24 coll channels", "2 coll channels"),))
    [f] = by_rule(log, "NET004")
    assert f.title == "Fewer channels than the topology gives" and f.extra["nccl"]["channels"] == 2
    assert f.extra["nccl"]["expected"] == 24


# Where each NET rule fires on the real corpus (and so where it stays silent): a change here is a decision.
CORPUS_CASES = {
    "p5-2x8-h100-efa-nvls-allreduce-2.22.log": {"NET005"},
    "1x2-a100pcie-nvlbridge-allreduce-2.27.log": set(),
    "ault-2x2-shm-socket-tree-simple-2.17.log": {"NET001", "NET004", "NET005"},
    "pizdaint-4x1-aries-socket-tree-ll128-2.17.log": {"NET001", "NET005"},
    "1x3-a100-p2pdirect-coll-alltoall-2.7.log": set(),
    "polaris-1x4-coll-tuning-trace-2.20.log": set(),
    "snellius-1x4-h100-p2pdirect-allreduce-2.22.log": {"NET005"},
    "corigpu-2node-connect-noroute-2.8.log": {"NET006"},
    "perlmutter-2x4-ibext-ibv_create_cq-fail-2.9.log": {"NET002", "NET006"},
    "perlmutter-2x4-roce-ibv_create_cq-fail-2.7.log": {"NET002", "NET003", "NET006"},
    "perlmutter-2x4-podman-ofi-regmr-fail-2.21.log": {"NET005", "NET006"},
    "corigpu-2x8-v100-ib-9nic-wcerr12-2.4.log": {"NET002", "NET003", "NET006"},
    "2x1-v100-mlx5-roce-allgather-ok-2.5.log": {"NET002", "NET005", "NET007"},
    "1x2-a100pcie-p2pipc-allreduce-2.16.log": {"NET005"},
    "1x2-smartio-p2pdisabled-shm-allreduce-2.23.log": {"NET004", "NET005"},
    "2x1-a100pcie-ib-gdr-on-allreduce-2.16.log": {"NET005"},
}


@pytest.mark.parametrize("name", sorted(CORPUS_CASES))
def test_which_rules_fire_on_each_corpus_log(name, tmp_path_factory):
    assert {f.rule_id for f in findings(real(name, tmp_path_factory))} == CORPUS_CASES[name]


def test_first_sentence_ends_outside_a_quoted_line():
    from analysis.diagnosis.nccl import first_sentence
    assert first_sentence("Rank 1 logged `for device 3. RC: -22` first: bad. More.") == \
        "Rank 1 logged `for device 3. RC: -22` first: bad."
    assert first_sentence("no period") == "no period."


def test_net004_planted_p2p_over_pcie_where_nvlink_exists(tmp_path):
    log, _src = planted(tmp_path, NVL_BRIDGE, replace=(("type NVL/PIX", "type PHB/PIX"),))
    [f] = by_rule(log, "NET004")
    assert f.title == "Intra-node P2P over PCIe where NVLink exists" and "NVL[240.0]" in f.message


# --- the two checks with no real case in the corpus (issue #44): the corpus says why -----------------------------


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name.split("__")[-1][:50])
def test_no_corpus_log_runs_fewer_channels_than_its_graph_search_found(path, tmp_path_factory):
    """NET004's channel check has no real case: every corpus log that prints its graph search runs exactly
    twice the channels of its best ring/tree graph (NCCL duplicates them), so the check stays silent."""
    log = real(path.name.split("__")[-1], tmp_path_factory)
    searched = [g.nchannels for g in log.graphs if g.nchannels]
    if searched:
        assert log.nchannels() == 2 * max(searched)
    assert not [f for f in by_rule(log, "NET004") if (f.extra.get("nccl") or {}).get("check") == "channels"
                or "channel" in f.title.lower()]


def test_no_corpus_log_shows_a_gpu_with_several_candidate_nics():
    """'A GPU off its closest NIC' has no real case: NCCL prints one per-GPU GPUDirect line (with its distance)
    per NIC it considers for that GPU, and no corpus log prints two NICs for one GPU of a host."""
    for path in LOGS:
        seen: dict[tuple[str, str], set[str]] = {}
        for line in path.read_text(errors="replace").splitlines():
            if "GPU Direct RDMA" not in line or " for GPU " not in line or " / HCA " not in line:
                continue
            host = line.strip().split(":")[0].split()[-1]
            gpu = line.split(" for GPU ")[1].split()[0]
            hca = line.split(" / HCA ")[1].split()[0]
            seen.setdefault((host, gpu), set()).add(hca)
        assert all(len(h) == 1 for h in seen.values()), (path.name, {k: v for k, v in seen.items() if len(v) > 1})
