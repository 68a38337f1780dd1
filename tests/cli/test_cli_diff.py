"""`goodput diff`: planted variants of corpus exports (a slowed kernel, an added gap) give the numbers the raw
exports say, the same numbers as the service's compare on the same reports, and the --fail-on gate's exit status."""

from __future__ import annotations

import io
import json

import pytest

from app.services.compare import compare_runs
from tests.app.conftest import process_run
from tests.cli.variants import add_gap, goodput, kernel_totals_raw, slow_kernel
from tests.conftest import corpus_file

STEPS = corpus_file("cupy-power-iteration.sqlite")      # one GPU, 44 NVTX steps
CLOVER = corpus_file("cloverleaf-devsync.sqlite")       # one GPU, rank 0
R0 = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
R1 = corpus_file("nccl-ring-2node-r1-ault44.sqlite")
GAP_NS = 25_000_000


def diff_json(*args: str) -> tuple[int, dict]:
    proc = goodput("diff", *args, "--format", "json", "--quiet")
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stderr == ""
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def slowed(tmp_path_factory):
    dst = tmp_path_factory.mktemp("slowed") / "slowed.sqlite"
    name, added = slow_kernel(STEPS, dst)
    return dst, name, added


@pytest.fixture(scope="module")
def gapped(tmp_path_factory):
    dst = tmp_path_factory.mktemp("gapped") / "gapped.sqlite"
    add_gap(CLOVER, dst, GAP_NS)
    return dst


def test_slowed_kernel_is_the_only_kernel_row_with_the_raw_numbers(slowed):
    dst, name, added = slowed
    status, diff = diff_json(str(STEPS), str(dst))
    assert status == 0  # no --fail-on: never 1
    base_ns, launches = kernel_totals_raw(STEPS)[name]
    assert diff["kernels"] == [{"name": name, "base_ns": base_ns, "head_ns": base_ns + added, "delta_ns": added,
                                "delta_pct": round(100.0 * added / base_ns, 3), "base_count": launches,
                                "head_count": launches}]
    assert diff["noise"]["kernels_below_noise"] == len(kernel_totals_raw(STEPS)) - 1
    # More GPU work per step: the step time (median GPU time per step) grows, per rank and for the run.
    assert diff["step_time_ns"]["delta"] > 0
    (rank,) = diff["ranks"]
    assert rank["steps"]["count"]["delta"] == 0
    assert rank["steps"]["median_ns"] == diff["step_time_ns"]
    assert diff["breakdown"]["compute_ns"]["delta"] > 0


def test_added_gap_grows_span_and_idle_by_exactly_the_gap(gapped):
    # The gap is planted in the middle of the whole export: judge the whole of each report.
    status, diff = diff_json(str(CLOVER), str(gapped), "--window", "all")
    bd = diff["breakdown"]
    assert bd["span_ns"]["delta"] == GAP_NS
    assert bd["idle_ns"]["delta"] == GAP_NS
    assert bd["compute_ns"]["delta"] == 0 and bd["memory_only_ns"]["delta"] == 0
    compute, span = bd["compute_ns"]["base"], bd["span_ns"]["base"]
    assert bd["goodput_pct"]["head"] == round(100.0 * compute / (span + GAP_NS), 3)
    assert diff["kernels"] == []  # no kernel changed its duration
    assert diff["new_findings"] == [] or all(f["rule_id"].startswith(("GPU", "HOST")) for f in diff["new_findings"])


def test_fail_on_gate_exit_status(gapped):
    drop = None
    for spec, want in (("goodput:-2pt", 1), ("goodput:-50pt", 0), ("idle:+20ms", 1), ("idle:+30ms", 0),
                       ("step_time:+5%", 0)):
        proc = goodput("diff", str(CLOVER), str(gapped), "--fail-on", spec, "--format", "json", "--quiet",
                       "--window", "all")
        assert proc.returncode == want, (spec, proc.stdout[-2000:], proc.stderr)
        diff = json.loads(proc.stdout)
        (check,) = diff["gate"]
        drop = diff["breakdown"]["goodput_pct"]["delta"]
        # The steps are found (a host-sync cadence): one added gap leaves the median step time unchanged.
        assert check["status"] == ("failed" if want else "passed"), check
    assert -50 < drop <= -2  # the gap's real size makes the two goodput checks meaningful
    proc = goodput("diff", str(CLOVER), str(gapped), "--fail-on", "goodput:-2pt,step_time:+5%", "--quiet",
                   "--window", "all")
    assert proc.returncode == 1 and "FAILED        goodput:-2pt" in proc.stdout


@pytest.mark.parametrize("spec", ["goodput:2pt", "goodput:-2", "speed:+5%", "step_time:+5pt", "", "goodput:-x%"])
def test_fail_on_parse_errors_exit_2_with_one_line(spec):
    proc = goodput("diff", str(CLOVER), str(CLOVER), "--fail-on", spec)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("goodput: --fail-on"), proc.stderr


def test_bad_diff_arguments_exit_2(tmp_path):
    for args in ([str(CLOVER)], [str(CLOVER), str(tmp_path / "nope.sqlite")],
                 [str(CLOVER), str(CLOVER), "--base", str(CLOVER)], ["1", "2", "--server", "http://127.0.0.1:9"]):
        proc = goodput("diff", *args)
        assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, (args, proc.stderr)


def test_ranks_pair_by_rank_and_duckdb_inputs_skip_ingest(tmp_path):
    slow_r1 = tmp_path / "r1-slow.sqlite"
    name, added = slow_kernel(R1, slow_r1)
    r0_db = tmp_path / "r0.duckdb"
    assert goodput("ingest", str(R0), "--out", str(r0_db), "--quiet").returncode == 0
    # The head's rank 1 comes first: pairing is by rank, not by position.
    status, diff = diff_json("--base", str(r0_db), str(R1), "--head", str(slow_r1), str(R0))
    ranks = {r["rank"]: r for r in diff["ranks"]}
    assert sorted(ranks) == [0, 1]
    assert all(d["delta"] in (0, 0.0) for d in ranks[0]["breakdown"].values())
    # Rank 1's only kernel is an NCCL one that nothing overlaps: all the added time is exposed communication.
    assert ranks[1]["breakdown"]["comm_exposed_ns"]["delta"] == added
    assert ranks[1]["breakdown"]["span_ns"]["delta"] == added
    assert ranks[1]["breakdown"]["compute_ns"]["delta"] == 0
    (row,) = diff["kernels"]
    assert (row["name"], row["delta_ns"]) == (name, added)
    # A DuckDB file written by `goodput ingest` is read as it is: same analysis as its export.
    from_db = json.loads(goodput("analyze", str(r0_db), "--format", "json", "--quiet").stdout)
    from_export = json.loads(goodput("analyze", str(R0), "--format", "json", "--quiet").stdout)
    for rep in (*from_db["reports"], *from_export["reports"]):
        rep.pop("file")  # the FILE given: the only difference, as is each finding's report label
    for f in (*from_db["findings"], *from_export["findings"]):
        f.pop("report")
        for g in f.get("groups") or []:  # COMM003 names the report of each rank's share
            for e in g.get("ranks") or []:
                e.pop("report")
    assert from_db == from_export
    not_ours = tmp_path / "other.duckdb"
    import duckdb

    duckdb.connect(str(not_ours)).close()
    proc = goodput("analyze", str(not_ours))
    assert proc.returncode == 2 and proc.stderr.startswith(f"goodput: {not_ours}: unknown_format: ")


def _upload(client, headers, path, job):
    r = client.post("/api/v1/runs", headers=headers,
                    data={"job": job, "files": [(io.BytesIO(path.read_bytes()), path.name)]})
    assert r.status_code == 202, r.json
    return r.json["id"]


def _fingerprints(findings):
    return [(f["rule_id"], f["rank"], (f["evidence"] or [{}])[0].get("name"), f["impact_ns"], f["severity"])
            for f in findings]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_numbers_equal_the_services_compare(client, auth, session, settings, slowed, gapped):
    for base_file, head_file in ((STEPS, slowed[0]), (CLOVER, gapped)):
        base = _upload(client, auth["write"], base_file, "cmp")
        head = _upload(client, auth["write"], head_file, "cmp")
        process_run(settings, session, base)
        process_run(settings, session, head)
        service = compare_runs(session, settings.data_dir, base, head)
        _, cli = diff_json(str(base_file), str(head_file))
        for key in ("breakdown", "step_time_ns", "noise", "kernels"):
            assert cli[key] == service[key], key
        assert len(cli["ranks"]) == len(service["ranks"]) == 1
        assert cli["ranks"][0]["breakdown"] == service["ranks"][0]["breakdown"]
        assert cli["ranks"][0]["steps"] == service["ranks"][0]["steps"]
        for key in ("new_findings", "resolved_findings"):
            assert _fingerprints(cli[key]) == _fingerprints(service[key]), key
        api = client.get(f"/api/v1/compare?base={base}&head={head}", headers=auth["read"]).json
        assert api["breakdown"] == service["breakdown"] and api["kernels"] == service["kernels"]
