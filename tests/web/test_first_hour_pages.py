"""Issue #42 on the server side: the ncu run page (kernel table from the durations the headline counts, no
nsys-only sections, labels not cut mid-word), a refused window kept in its field, and numbers through
analysis/fmt.py."""

from __future__ import annotations

import re
from html import unescape

import pytest
import sqlalchemy as sa

from analysis import fmt
from app.models import Report, RunSummary
from app.services.pages.web_findings import short_file_name
from tests.conftest import NCU_FILES, corpus_file
from tests.web import seed
from tests.web.conftest import csrf_of


@pytest.mark.parametrize("src", NCU_FILES, ids=lambda p: p.name.split("__")[-1])
def test_ncu_kernel_table_adds_up_to_the_profiled_time_of_the_headline(client, db, settings, ingested, src) -> None:
    run_id = seed.store_run(db, settings, ingested, [src], job="ncu-table")
    report = db.scalar(sa.select(Report).where(Report.run_id == run_id))
    kernels = client.get(f"/runs/{run_id}/reports/{report.id}/tables.json").get_json()["kernels"]
    headline = (report.info or {}).get("gpu_time_ns")
    timed = [k for k in kernels if k["total_ns"] is not None]
    if headline is None:      # conv2d-shared-memory: neither a duration nor cycles in the export
        assert not timed
        return
    assert timed and abs(sum(k["total_ns"] for k in timed) - headline) <= len(timed)
    assert sum(k["count"] for k in kernels) == (report.info or {})["kernels_profiled"]
    assert sum(k["pct"] for k in timed) == pytest.approx(100.0)
    for k in timed:
        assert k["min_ns"] <= k["mean_ns"] <= k["max_ns"] <= k["total_ns"]


def test_ncu_page_has_no_nsys_sections_and_whole_words(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("numba-copy-blocked-full.csv")], job="ncu-page")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="ncu-kpis"' in html
    assert 'id="window-form"' not in html and 'id="breakdown"' not in html and "No GPU activity" not in html
    assert '<section id="nvtx-section" hidden>' in html
    labels = {unescape(x) for x in re.findall(r'<span class="rank-name muted">([^<]*)</span>', html)}
    assert labels == {"…numba-copy-blocked-full · GPU 0"}


@pytest.mark.parametrize(("name", "short"), [
    ("brycelelbach__nsightful__numba-copy-blocked-full.csv", "…numba-copy-blocked-full"),
    ("ZhiyiHu1999__DistributedSysLab_FS24__nccl-ring-2node-r0-ault43.sqlite", "…FS24__nccl-ring-2node-r0-ault43"),
    ("vecadd.sqlite", "vecadd"), ("a.b.csv.gz", "a.b"), ("x" * 50 + ".csv", "…" + "x" * 32),
])
def test_short_file_names_end_on_whole_words(name, short) -> None:
    assert short_file_name(name) == short


def test_a_refused_window_stays_in_the_field(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("cupy-power-iteration.sqlite")], job="window")
    token = csrf_of(client.get(f"/runs/{run_id}").get_data(as_text=True))
    refused = client.post(f"/runs/{run_id}/analysis", data={"window": "time:5-1", "csrf_token": token})
    assert refused.status_code == 302
    html = client.get(refused.headers["Location"]).get_data(as_text=True)
    assert 'name="window" value="time:5-1"' in html and 'aria-invalid="true"' in html
    assert "not one of steady" in html


@pytest.mark.parametrize(("x", "text"), [(12.345, "12.3 %"), (224.3, "224.3 %"), (10972.1, "10,972 %"),
                                         (-0.04, "-0.0 %"), (None, "–")])
def test_percentages_never_carry_more_than_a_tenth(x, text) -> None:
    assert fmt.pct(x) == text


@pytest.mark.parametrize(("x", "unit", "text"), [(196.5e9, "B/s", "196 GB/s"), (2.9018e11, "FLOP/s", "290 GFLOP/s"),
                                                 (1234.0, "FLOP/s", "1.23 kFLOP/s"), (0, "B", "0 B"),
                                                 (None, "B", "–"), (5e18, "FLOP/s", "5,000 PFLOP/s")])
def test_decimal_prefixes(x, unit, text) -> None:
    assert fmt.si(x, unit) == text


def test_numbers_and_changes() -> None:
    assert [fmt.number(x) for x in (1230, 1230.0, 30.387, 0.5, 3303.2, None)] == \
        ["1,230", "1,230", "30.4", "0.500", "3,303", "–"]
    assert fmt.signed(fmt.duration(18_149_000), 18_149_000) == "+18.1 ms"
    assert fmt.signed(fmt.duration(-18_149_000), -18_149_000) == "-18.1 ms"


def test_the_timeline_carries_each_reports_loops_on_the_run_clock(client, db, settings, ingested) -> None:
    from app.models import RunSummary

    run_id = seed.store_run(db, settings, ingested, [corpus_file("cupy-power-iteration.sqlite")], job="loops")
    win = client.get(f"/runs/{run_id}/timeline.json?buckets=300").get_json()
    offset = {g["report_id"]: g["offset_ns"] for g in win["groups"]}
    (item,) = win["phases"]
    stored = db.scalar(sa.select(RunSummary.data).where(RunSummary.run_id == run_id,
                                                        RunSummary.report_id == item["report_id"]))
    loops = stored["iterations"]["loops"]
    assert loops, "the analysis found the power iteration's loop"
    off = offset[item["report_id"]]
    assert item["loops"] == [{"index": lp["index"], "start_ns": lp["start_ns"] + off, "end_ns": lp["end_ns"] + off,
                              "count": lp["count"], "main": lp["main"]} for lp in loops]


@pytest.mark.parametrize("src", ["conv2d-result-rules.csv", "pytorch-dropout-dram.csv"])
def test_the_roofline_draws_the_roof_each_kernel_was_judged_against(client, db, settings, ingested, src) -> None:
    from app.models import RunSummary

    run_id = seed.store_run(db, settings, ingested, [corpus_file(src)], job="roofs")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    svg = html[html.index('id="roofline"'):html.index("</svg>", html.index('id="roofline"'))]
    data = next(s.data for s in db.scalars(sa.select(RunSummary).where(RunSummary.run_id == run_id))
                if s.report_id is not None)
    roofline = max(data["kernels"], key=lambda k: k.get("duration_ns") or 0)["memory"]["roofline"]
    label = f"{roofline['roof'].upper()} roof {fmt.si(roofline['attainable_flops'], 'FLOP/s')}"
    assert f">{label}</text>" in svg and 'class="roof-mark"' in svg
    assert "compute roof unknown" in svg     # these exports carry no device peaks: said on the chart
    assert not re.search(r">[^<]*\d\.\d{4,}[^<]*<", svg)   # tick and roof labels through fmt


def test_the_job_filter_finds_part_of_a_name_and_deleted_is_no_option(client, db, settings) -> None:
    from app.models import Job, Run

    for name in ("nccl-ring", "NCCL-tree", "llama_50%"):
        db.add(Run(job=Job(name=name), tags={}, submitter="alice", source="web", status="ready"))
    db.commit()

    def jobs(query: str) -> set[str]:
        html = client.get(f"/?job={query}").get_data(as_text=True)
        return set(re.findall(r'<a href="/jobs/[^"]+">([^<]+)</a>', html))

    assert jobs("nccl") == {"nccl-ring", "NCCL-tree"}
    assert jobs("ring") == {"nccl-ring"}
    assert jobs("50%25") == {"llama_50%"} and jobs("_5") == {"llama_50%"} and jobs("ll_ma") == set()  # % and _ literal
    html = client.get("/").get_data(as_text=True)
    status = html[html.index('name="status"'):html.index("</select>", html.index('name="status"'))]
    assert "ready" in status and "deleted" not in status


def test_a_token_upload_names_the_token_not_a_person(client, db) -> None:
    from app.services.accounts.tokens import create_token

    secret = create_token(db, "nightly scheduler", "write").token
    db.commit()
    api = client.application.test_client()      # no session: the bearer token alone
    made = api.post("/api/v1/runs", json={"job": "tokened"}, headers={"Authorization": f"Bearer {secret}"})
    assert made.status_code == 202, made.json
    html = unescape(client.get(f"/runs/{made.json['id']}").get_data(as_text=True))
    assert "submitted with\n  the API token “nightly scheduler” via api" in html


def test_under_loop_n_the_iterations_and_per_step_figures_are_that_loops(client, db, settings, ingested) -> None:
    """clue-um-t4 has two loops (non-tiled then tiled kernels; the second is the main one). Under ``loop:0`` the
    Iterations section, the slowest steps and the findings' impact per step are loop 0's, not dropped."""
    from app.models import Finding, RunSummary
    from app.web.filters import fmt_ns

    run_id = seed.store_run(db, settings, ingested, [corpus_file("clue-um-t4.sqlite")], job="loop-window")
    token = csrf_of(client.get(f"/runs/{run_id}").get_data(as_text=True))
    assert client.post(f"/runs/{run_id}/analysis", data={"window": "loop:0", "csrf_token": token}).status_code == 302
    seed.finish_analysis(db, settings, run_id)
    db.expire_all()
    report = db.scalar(sa.select(Report).where(Report.run_id == run_id))
    data = db.scalar(sa.select(RunSummary.data).where(RunSummary.report_id == report.id))
    loops, ana = data["iterations"]["loops"], data["iterations"]["anatomy"]
    first = loops[0]
    assert data["window"]["spec"] == "loop:0" and not first["main"]
    assert (data["window"]["start_ns"], data["window"]["end_ns"]) == (first["start_ns"], first["end_ns"])
    assert ana["loop"] == 0 and ana["steady_count"] == first["count"]
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    section = html[html.index('<div id="iterations">'):html.index("Findings, ranked by impact")]
    assert f"Loop 0 of {len(loops)} (the analysis window): {first['count']} iterations" in section
    assert f'data-q="median" data-ns="{first["median_ns"]}">{fmt_ns(first["median_ns"])}<' in section
    assert '<tr data-loop="0" class="window-loop">' in section
    slow = ana["slowest_steps"]
    assert slow and all(0 <= st["index"] < first["count"] for st in slow)
    assert section.count('<tr data-index="') == len(slow)
    steady = [f for f in db.scalars(sa.select(Finding).where(Finding.run_id == run_id))
              if f.extra.get("phase") == "steady" and f.impact_ns]
    assert steady
    for f in steady:
        n, per_step = f.extra["steps_in_window"], f.extra["impact_per_step_ns"]
        assert n == first["count"] and per_step == round(f.impact_ns / n)
        assert f'title="{fmt_ns(f.impact_ns)} over the {n} steps of the window">{fmt_ns(per_step)} per step</span>' in html


def test_findings_whose_evidence_is_totals_per_call_show_those_calls_on_the_timeline(client, db, settings,
                                                                                     ingested) -> None:
    """saxpy-mpi rank 0: HOST003 (idle inside MPI_Send/MPI_Recv) and MEM006 (idle inside cudaMalloc) give totals per
    call name, no times. The page offers their calls on the timeline; calls.json finds the calls of those names
    that held the GPU idle in the window, and their idle adds up to the rule's impact (measured by the idle
    anatomy's painting, a different walk)."""
    from app.models import Finding

    run_id = seed.store_run(db, settings, ingested, [corpus_file("saxpy-mpi-rank0-perlmutter.sqlite")], job="calls")
    report = db.scalar(sa.select(Report).where(Report.run_id == run_id))
    window = db.scalar(sa.select(RunSummary.data).where(RunSummary.report_id == report.id))["window"]
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    findings = {f.rule_id: f for f in db.scalars(sa.select(Finding).where(Finding.run_id == run_id))}
    for rule in ("HOST003", "MEM006"):
        f = findings[rule]
        assert not any(isinstance(e.get("start_ns"), int) for e in f.evidence)
        names = [n["name"] for n in f.extra["names"]]
        block = html[html.index(f'data-rule="{rule}"'):]
        block = block[:block.index("</details>")]
        url = f"/runs/{run_id}/reports/{report.id}/calls.json"
        assert f'data-calls-url="{url}"' in block and "Show on the timeline" in block
        body = client.get(url, query_string=[("name", n) for n in names]).get_json()
        rows = body["longest"]
        assert rows and body["count"] == len(rows) <= 20, body
        assert {r["name"] for r in rows} <= set(names)
        assert all(window["start_ns"] <= r["start_ns"] < r["end_ns"] <= window["end_ns"] for r in rows)
        assert [r["idle_ns"] for r in rows] == sorted((r["idle_ns"] for r in rows), reverse=True)
        assert sum(r["idle_ns"] for r in rows) == f.impact_ns
    assert "Not on the timeline" not in html


def test_a_finding_with_no_time_range_says_why() -> None:
    from app.models import Report
    from app.services.pages.web_run import timeline_hints

    reports = [Report(id=1, kind="nsys", trace_path="r/1.duckdb"), Report(id=2, kind="ncu", trace_path="r/2.duckdb"),
               Report(id=3, kind="nccl", trace_path="r/3.duckdb")]
    timed = {"rule_id": "GPU001", "report_id": 1, "evidence": [{"start_ns": 5, "end_ns": 9}]}
    named = {"rule_id": "MEM006", "report_id": 1, "evidence": [{"name": "cudaMalloc", "value_ns": 3}],
             "names": [{"name": "cudaMalloc", "ns": 3, "calls": 1}]}
    bare = {"rule_id": "X", "report_id": 1, "evidence": []}
    out = timeline_hints([timed, named, bare, {"rule_id": "NCU001", "report_id": 2, "evidence": [{"name": "k"}]},
                          {"rule_id": "NET001", "report_id": 3, "evidence": []},
                          {"rule_id": "COMM003", "report_id": None, "evidence": []}], reports)
    assert "timeline_calls" not in out[0] and "timeline_reason" not in out[0]
    assert out[1]["timeline_calls"] == ["cudaMalloc"]
    assert "totals over the analysis window" in out[2]["timeline_reason"]
    assert "Nsight Compute" in out[3]["timeline_reason"] and "NCCL debug log" in out[4]["timeline_reason"]
    assert "whole run" in out[5]["timeline_reason"]
