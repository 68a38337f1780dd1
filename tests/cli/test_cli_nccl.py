"""`goodput analyze` and `goodput ingest` on NCCL debug logs, alone and with the run's nsys export: the network
path section, the NET findings among the others, the verdict line, and one-line errors on hostile input."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from analysis import fmt
from tests.conftest import ROOT, corpus_dir, corpus_file
from tests.nccl_planted import RING_EXPORTS, export_pids, ring_2node_rank_logs

NCCL = corpus_dir() / "nccl"
AULT = NCCL / "ZhiyiHu1999__DistributedSysLab_FS24__ault-2x2-shm-socket-tree-simple-2.17.log"
FAILED = NCCL / "sparticlesteve__nersc-pytorch-testing__perlmutter-2x4-roce-ibv_create_cq-fail-2.7.log"
# NCCL's connection lines: "Channel 00/0 : 1[81000] -> 2[41000] [send] via NET/Socket/0", "Channel 00 : 0[41000] -> 1[81000] via SHM/direct/direct".
CHANNEL = re.compile(r"Channel \d+(?:/\d+)? : (\d+)\[\w+\] -> (\d+)\[\w+\] (?:\[\w+\] )?via (\S+)")


def goodput(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodput_cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def _pairs_in_log(path: Path, transport_prefix: str) -> set[tuple[int, int]]:
    """The rank pairs whose connection lines name the transport, read from the log's text (the oracle)."""
    out = set()
    for line in path.read_text(errors="replace").splitlines():
        m = CHANNEL.search(line)
        if m and m.group(3).startswith(transport_prefix):
            out.add((int(m.group(1)), int(m.group(2))))
    return out


def test_analyze_a_log_alone_text_and_json():
    proc = goodput("analyze", str(AULT), "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    (rep,) = result["reports"]
    assert rep["tool"] == "nccl" and rep["tool_version"] == "2.17.1"
    path = result["network_path"]
    assert [n["host"] for n in path["nodes"]] == ["ault43", "ault44"]
    sockets = {(p["src"], p["dst"]) for p in path["pairs"] if p["inter_node"]}
    assert sockets == _pairs_in_log(AULT, "NET/Socket") and sockets
    assert {(p["src"], p["dst"]) for p in path["pairs"] if not p["inter_node"]} == _pairs_in_log(AULT, "SHM")
    ids = [f["rule_id"] for f in result["findings"]]
    assert "NET001" in ids  # inter-node over sockets
    assert {r["id"]: r["status"] for r in result["rules"]}["NET001"] == "ok"
    assert result["verdict"]["kind"] == "network" and result["verdict"]["rule_id"] == "NET001"
    assert "socket" in result["verdict"]["text"].lower()

    text = goodput("analyze", str(AULT), "--quiet")
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert out.startswith("Verdict: From the NCCL log: ")
    assert "== network path (NCCL 2.17.1" in out
    inter = next(line for line in out.splitlines() if line.startswith("   inter-node: NET/Socket/0"))
    for src, dst in sorted(sockets):
        assert f"{src}->{dst}" in inter
    assert re.search(r"^ +\d+\. \[critical\] NET001 ", out, re.M)


def test_a_log_of_another_run_beside_an_export_is_not_joined_to_it():
    """The corpus' ault 2x2 log and the nccl-ring-2node rank 0 export share a host name and a rank number, but
    the export's process (direct SQL on it) is no process of the log: another run, so nothing is joined."""
    export = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
    [pid] = export_pids(RING_EXPORTS[0])
    assert f"ault43:{pid}:" not in AULT.read_text()
    alone = json.loads(goodput("analyze", str(export), "--format", "json", "--quiet").stdout)
    result = json.loads(goodput("analyze", str(AULT), str(export), "--format", "json", "--quiet").stdout)
    path = result["network_path"]
    assert "joined" not in path and "inter_node_traffic" not in path
    assert path["not_joined"] == [{"report": str(export), "reason": f"its processes ({pid} on ault43.cscs.ch) are "
                                                                    "no rank of the log: another run"}]
    assert "holds NCCL rank" not in result["verdict"]["text"]
    assert result["reports"][1] == alone["reports"][0]
    text = goodput("analyze", str(AULT), str(export), "--quiet").stdout
    assert f"not joined: {export}: its processes ({pid} on ault43.cscs.ch) are no rank of the log" in text


def test_a_log_with_the_ranks_export_joins_them_and_the_verdict_says_so(tmp_path):
    export = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
    logs = ring_2node_rank_logs(tmp_path)  # the job's per-rank logs, with the processes its exports recorded
    alone = json.loads(goodput("analyze", str(export), "--format", "json", "--quiet").stdout)
    proc = goodput("analyze", *map(str, logs), str(export), "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    # ault43.cscs.ch (the export's host) is the log's ault43, and the export's process is the log's rank 0.
    assert result["network_path"]["joined"] == [{"report": str(export), "host": "ault43.cscs.ch", "rank": 0,
                                                 "by": "host+pid", "nccl_ranks": [0]}]
    # What crosses the nodes, joined: the export's NCCL kernels are AllReduce (read from its SQLite), and
    # the log's inter-node pairs run over sockets.
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    kernels = {n for (n,) in con.execute("SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                                         "ON s.id = k.demangledName")}
    con.close()
    assert kernels and all(k.startswith("ncclKernel_AllReduce_") for k in kernels)
    assert result["network_path"]["inter_node_traffic"] == {"collectives": ["AllReduce"],
                                                            "transports": ["NET/Socket"], "gdr": None}
    verdict = result["verdict"]["text"]
    assert verdict.startswith(alone["verdict"]["text"].rstrip("."))  # the trace's own verdict leads
    assert "holds NCCL rank 0" in verdict and "the inter-node AllReduce runs over NET/Socket" in verdict
    # The export's findings are the same with the log beside it; the log's NET findings come on top.
    own = [(f["rule_id"], f["impact_ns"]) for f in result["findings"] if not f["rule_id"].startswith("NET")]
    assert own == [(f["rule_id"], f["impact_ns"]) for f in alone["findings"]]
    assert any(f["rule_id"] == "NET001" for f in result["findings"])
    assert result["reports"][2] == alone["reports"][0]


def test_ingest_then_analyze_the_duckdb_file(tmp_path):
    out = tmp_path / "job.duckdb"
    proc = goodput("ingest", str(AULT), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{out}: nccl report, nodes 2, ranks 4, nics 2, warnings 0"
    direct = json.loads(goodput("analyze", str(AULT), "--format", "json", "--quiet").stdout)
    again = goodput("analyze", str(out), "--format", "json", "--quiet")
    assert again.returncode == 0, again.stderr
    reread = json.loads(again.stdout)
    assert {**reread["network_path"], "report": None} == {**direct["network_path"], "report": None}


def test_a_failed_run_names_the_rank_and_nic_that_failed_first():
    result = json.loads(goodput("analyze", str(FAILED), "--format", "json", "--quiet").stdout)
    verdict = result["verdict"]
    assert verdict["rule_id"] == "NET006"
    # LABELS.md: ranks 3 and 7 (the senders of the cross-node edges) log `ibv_create_cq failed` on NET/IB/1.
    assert "ibv_create_cq" in verdict["text"] and "mlx5_1" in verdict["text"]
    assert re.search(r"\b3\b", verdict["text"]) and re.search(r"\b7\b", verdict["text"])


def test_hostile_inputs_exit_2_with_one_line(tmp_path):
    binary = tmp_path / "job.log"
    binary.write_bytes(bytes(range(256)) * 4096)
    prose = tmp_path / "notes.txt"
    prose.write_text("no NCCL here, just words\n" * 1000)
    for path, code in ((binary, "not_sqlite"), (prose, "unknown_format")):
        proc = goodput("analyze", str(path), "--quiet")
        assert proc.returncode == 2, proc.stdout
        assert proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1 and f"{path}: {code}: " in proc.stderr


def test_a_log_with_a_huge_line_is_bounded(tmp_path):
    # A log that starts right and then holds one 12 MB line of markup: a result or one line, never a hang.
    src = tmp_path / "huge.log"
    head = AULT.read_bytes()[:4000]
    src.write_bytes(head + b"host:1:1 [0] NCCL INFO " + b"<script>alert(1)</script>" * 500_000 + b"\n")
    proc = goodput("analyze", str(src), "--format", "json", "--quiet")
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        assert len(proc.stderr.splitlines()) == 1
    else:
        assert json.loads(proc.stdout)["reports"][0]["tool"] == "nccl"


def test_a_log_beside_two_ranks_changes_nothing_the_traces_say():
    # Every field of the two ranks' analysis is the same with the log beside them (the aligned steady window,
    # the network matrix, the collectives' split, reports, findings, rule statuses); the log adds its own.
    ranks = [str(corpus_file("nccl-ring-2node-r0-ault43.sqlite")), str(corpus_file("nccl-ring-2node-r1-ault44.sqlite"))]
    two = json.loads(goodput("analyze", *ranks, "--format", "json", "--quiet").stdout)
    three = json.loads(goodput("analyze", str(AULT), *ranks, "--format", "json", "--quiet").stdout)
    assert set(three) - set(two) == {"network_path"}
    for key in set(two) - {"verdict", "reports", "findings", "rules"}:
        assert three[key] == two[key], key
    assert three["reports"][1:] == two["reports"] and three["reports"][0]["tool"] == "nccl"
    assert [f for f in three["findings"] if not f["rule_id"].startswith("NET")] == two["findings"]
    assert [r for r in three["rules"] if not r["id"].startswith("NET")] == two["rules"]
    assert three["verdict"]["text"].startswith(two["verdict"]["text"].rstrip("."))


def test_net_thresholds_are_overrides_like_any_other():
    # The log forces two settings (NCCL_ALGO=Tree, NCCL_PROTO=Simple): NET005 reports them unless the job
    # asks for at least three before it speaks.
    forced = [line for line in AULT.read_text().splitlines() if re.search(r"NCCL_(ALGO|PROTO) set by environment", line)]
    assert forced
    base = json.loads(goodput("analyze", str(AULT), "--format", "json", "--quiet").stdout)
    raised = json.loads(goodput("analyze", str(AULT), "--format", "json", "--quiet",
                                "--threshold", "NET005.min_settings=3").stdout)
    assert "NET005" in [f["rule_id"] for f in base["findings"]]
    assert [f["rule_id"] for f in raised["findings"]] == [f["rule_id"] for f in base["findings"] if f["rule_id"] != "NET005"]
    bad = goodput("analyze", str(AULT), "--quiet", "--threshold", "NET005.nope=3")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1
    assert "bad_option: rule NET005 has no threshold 'nope'" in bad.stderr


# --- several logs of one job, and each link's achieved bandwidth next to its transport --------------------------


R0 = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
R1 = corpus_file("nccl-ring-2node-r1-ault44.sqlite")


def test_analyze_per_rank_logs_with_the_exports_joins_each_links_bandwidth(tmp_path):
    logs = ring_2node_rank_logs(tmp_path)
    proc = goodput("analyze", *map(str, logs), str(R0), str(R1), "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    path = result["network_path"]
    assert [f["file"] for f in path["files"]] == [str(p) for p in logs]  # the CLI labels reports by path
    assert path["files"][1]["joined_by"] == "commId 0x5eed" and path["left_out"] == []
    assert [(r["rank"], r["host"]) for r in path["ranks"]] == [(0, "ault43"), (1, "ault44")]
    # joined by host and process id: each log's process is the one its export recorded (direct SQL on the export)
    assert [r["pid"] for r in path["ranks"]] == [export_pids(RING_EXPORTS[0])[0], export_pids(RING_EXPORTS[1])[0]]
    assert path["links_join"] == {"joined": True, "reason": None, "without_log_pair": 0, "by": "host+pid",
                                  "by_reason": None}
    assert [(j["nccl_ranks"], j["by"]) for j in path["joined"]] == [([0], "host+pid"), ([1], "host+pid")]
    measured = {(k["sender"], k["receiver"]): k for k in result["network"]["links"]}
    assert set(measured) == {(0, 1), (1, 0)}
    for link in path["links"]:
        m = measured[(link["sender"], link["receiver"])]
        assert link["transports"] == ["NET/Socket/0"] and link["inter_node"] is True
        assert link["bandwidth_bps"] == m["bandwidth_bps"] and link["bytes"] == m["bytes"] == 8_388_608
    # each log keeps its own summary; the first carries the job's path
    assert result["reports"][1]["nccl_merged_into"] == str(logs[0])
    text = goodput("analyze", *map(str, logs), str(R0), str(R1), "--quiet").stdout
    merged = next(line for line in text.splitlines() if "merged from 2 logs of one job: " in line)
    assert str(logs[0]) in merged  # the line is clipped to the terminal's width
    assert "achieved bandwidth per link: the exports' ranks checked against the log's by host+pid" in text
    bw = fmt.si(measured[(0, 1)]["bandwidth_bps"] * 8, "b/s")
    assert f"link 0->1 (ault43.cscs.ch -> ault44.cscs.ch): NET/Socket/0: {bw} achieved over 8.39 MB" in text


def test_logs_of_a_restarted_job_are_not_joined_to_the_exports_by_rank_alone(tmp_path):
    """The same hosts and ranks, but other processes (a restarted job, planted: each pid + 1): host and rank
    agree, host and process id do not, so no link is joined and the reason names the process."""
    [p0], [p1] = (export_pids(name) for name in RING_EXPORTS)
    logs = ring_2node_rank_logs(tmp_path, pids=(p0 + 1, p1 + 1))
    proc = goodput("analyze", *map(str, logs), str(R0), str(R1), "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    path = json.loads(proc.stdout)["network_path"]
    assert "links" not in path and path["links_join"]["joined"] is False and path["links_join"]["by"] == "host+pid"
    assert path["links_join"]["reason"] == (
        f"{R0.name} is process {p0} on ault43.cscs.ch, which is no rank of the log (its processes on that host: "
        f"{p0 + 1}): not the same run (a restarted job has new process ids)")
    text = goodput("analyze", *map(str, logs), str(R0), str(R1), "--quiet").stdout
    assert f"achieved bandwidth per link: not joined ({R0.name} is process {p0} on ault43.cscs.ch" in text


def test_the_ault_2x2_log_is_not_the_exports_job_so_no_link_is_joined(tmp_path):
    """The corpus' ault log is a 4-rank job; the nccl-ring-2node exports a 2-rank one: rank 1 is another process."""
    proc = goodput("analyze", str(AULT), str(R0), str(R1), "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    path = json.loads(proc.stdout)["network_path"]
    assert "links" not in path
    assert path["links_join"]["joined"] is False
    assert path["links_join"]["reason"].startswith("the exports are ranks of a job of 2, the log's job has 4 ranks")


def test_analyze_logs_of_two_jobs_warns_and_keeps_the_first(tmp_path):
    logs = ring_2node_rank_logs(tmp_path)
    proc = goodput("analyze", str(logs[0]), str(AULT), str(logs[1]), "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [f["file"] for f in result["network_path"]["files"]] == [str(logs[0]), str(logs[1])]
    (left,) = result["network_path"]["left_out"]
    assert left["file"] == str(AULT) and left["reason"].startswith("another job: no communicator in common")
    warning = next(w for w in result["run_warnings"] if w["code"] == "nccl_logs_left_out")
    assert warning["reports"] == [str(AULT)]
    text = goodput("analyze", str(logs[0]), str(AULT), str(logs[1]), "--quiet").stdout
    assert f"left out: {AULT}: another job: no communicator in common" in text
