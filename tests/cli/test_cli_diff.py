"""`goodput diff`: planted variants of corpus exports (a slowed kernel, an added gap) give the numbers the raw
exports say, the same numbers as the service's compare on the same reports, and the --fail-on gate's exit status."""

from __future__ import annotations

import io
import json

import pytest

from app.services.pages.compare import compare_runs
from tests.app.conftest import process_run
from tests.cli.variants import add_gap, goodput, kernel_totals_raw, launch_durations_raw, slow_kernel
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
    # Launches that start in the judged window (the steady state), straight from each export.
    (w,) = diff["windows"]["base"]
    raw_b, raw_h = launch_durations_raw(STEPS, name, *w), launch_durations_raw(dst, name, *w)
    (row,) = diff["kernels"]
    assert (row["name"], row["status"], row["base_count"], row["head_count"]) == (name, "changed", len(raw_b), len(raw_h))
    assert (row["base_total_ns"], row["head_total_ns"]) == (sum(raw_b), sum(raw_h))
    assert row["per_launch_ns"]["delta_pct"] == pytest.approx(50.0, abs=0.01) and row["per_launch_ns"]["significant"]
    in_window = [n for n in kernel_totals_raw(STEPS) if launch_durations_raw(STEPS, n, *w)]
    assert diff["noise"]["kernels_compared"] == len(in_window)
    assert diff["noise"]["kernels_below_noise"] == len(in_window) - 1
    # The steps are NVTX ranges that did not move: the step time (the run page's: median step length) stays;
    # each step holds more compute, significantly; the NVTX steps' projected GPU time grows.
    assert diff["step_time_ns"]["delta"] == 0 and diff["steps"]["step_time_ns"]["changed"] is False
    assert diff["kpis"]["step_time_median_ns"]["delta"] == 0
    assert diff["steps"]["compute_ns"]["delta"] > 0 and diff["steps"]["compute_ns"]["significant"] is True
    (rank,) = diff["ranks"]
    assert rank["steps"]["count"]["delta"] == 0
    assert rank["steps"]["median_ns"]["delta"] > 0
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


@pytest.mark.parametrize("spec", ["goodput:2pt", "goodput:-2", "speed:+5%", "step_time:+5pt", "", "goodput:-x%",
                                  "kernel:+10%", "goodput:k:-2pt", "kernel:k:+2pt"])
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
    assert (row["name"], row["head_total_ns"] - row["base_total_ns"]) == (name, added)
    # One launch per rank and run: too few for the test, the noise floor decides and the row says so.
    assert row["per_launch_ns"]["test"] == "floor_only" and "too few" in row["per_launch_ns"]["note"]
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
    return [(f["rule_id"], f["rank"], f["impact_ns"], f["severity"]) for f in findings]


def _signed_in(app, session):
    from app.services.accounts.users import create_user
    from tests.web.conftest import PASSWORD, csrf_of

    create_user(session, "cmp-reader", PASSWORD)
    c = app.test_client()
    token = csrf_of(c.get("/login").get_data(as_text=True))
    assert c.post("/login", data={"username": "cmp-reader", "password": PASSWORD, "csrf_token": token}).status_code == 302
    return c


@pytest.mark.parametrize("backend", ["sqlite"])
def test_numbers_equal_the_services_compare(app, client, auth, session, settings, slowed, gapped):
    person = _signed_in(app, session)
    for base_file, head_file in ((STEPS, slowed[0]), (CLOVER, gapped)):
        base = _upload(client, auth["write"], base_file, "cmp")
        head = _upload(client, auth["write"], head_file, "cmp")
        process_run(settings, session, base)
        process_run(settings, session, head)
        service = compare_runs(session, settings, base, head).to_api()
        _, cli = diff_json(str(base_file), str(head_file))
        for key in ("breakdown", "step_time_ns", "noise", "kernels", "kernel_table", "kpis", "steps", "basis",
                    "windows", "notes"):
            assert cli[key] == service[key], key
        assert len(cli["ranks"]) == len(service["ranks"]) == 1
        assert cli["ranks"][0]["breakdown"] == service["ranks"][0]["breakdown"]
        assert cli["ranks"][0]["steps"] == service["ranks"][0]["steps"]
        assert cli["ranks"][0]["per_step"] == service["ranks"][0]["per_step"]
        for key in ("new_findings", "resolved_findings"):
            assert _fingerprints(cli[key]) == _fingerprints(service[key]), key
        assert cli["matched_findings"] == service["matched_findings"]
        api = client.get(f"/api/v1/compare?base={base}&head={head}", headers=auth["read"]).json
        for key in ("breakdown", "kernels", "kernel_table", "kpis", "steps", "matched_findings"):
            assert api[key] == service[key], key
        # The compare page shows the same numbers: its KPI rows and kernel rows carry them as data.
        page = person.get(f"/compare?base={base}&head={head}").get_data(as_text=True)
        for row in service["kernel_table"]:
            assert f'data-median-head="{row["per_launch_ns"]["head"]["median"]}"' in page
        st = service["kpis"]["step_time_median_ns"]
        assert f'data-key="step_time_median_ns" data-base="{st["base"]}" data-head="{st["head"]}"' in page
