"""The run page by rank, through Flask's test client on real corpus exports: the run-wide timeline
on the COMM002 clock, a click's launch and collective, the merged Chrome trace, findings grouped by rule
with the rank x rule matrix, formatted evidence and the "ready with errors" banner."""

from __future__ import annotations

import json
import re
from html import unescape

import duckdb
import sqlalchemy as sa

from app.models import Finding, Report, Run, RunSummary
from app.services.jobs import pipeline
from tests.analysis.timeline_wire import box_records
from tests.conftest import corpus_file
from tests.web import seed

NCCL_R0, NCCL_R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"
TORCHRUN = "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"


def _con(settings, report):
    return duckdb.connect(str(pipeline.data_path(settings, report.trace_path)), read_only=True)


def _reports(db, run_id):
    return list(db.scalars(sa.select(Report).where(Report.run_id == run_id).order_by(Report.rank)))


def test_run_timeline_aligns_the_ranks_on_the_session_clock(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="nccl")
    reports = _reports(db, run_id)
    starts, counts, firsts = [], [], []
    for r in reports:
        con = _con(settings, r)
        starts.append(int(con.execute("SELECT value FROM meta WHERE key = 'session_start_utc_ns'").fetchone()[0]))
        counts.append(con.execute("SELECT (SELECT count(*) FROM kernels) + (SELECT count(*) FROM memcpy)"
                                  " + (SELECT count(*) FROM memset)").fetchone()[0])
        firsts.append(con.execute("SELECT min(start_ns) FROM kernels").fetchone()[0])
        con.close()
    win = client.get(f"/runs/{run_id}/timeline.json?buckets=300").get_json()
    assert win["aligned"] is True
    assert [g["label"] for g in win["groups"]] == ["rank 0 · ault43 · GPU 0", "rank 1 · ault44 · GPU 0"]
    origin = min(starts)
    assert [g["offset_ns"] for g in win["groups"]] == [s - origin for s in starts]
    for g, n, first, start in zip(win["groups"], counts, firsts, starts, strict=True):
        kinds = {lane["kind"] for lane in g["lanes"]}
        assert kinds == {"gpu", "api", "nvtx"}
        gpu = [b for lane in g["lanes"] if lane["kind"] == "gpu" for b in box_records(lane["boxes"])]
        assert sum(b["count"] for b in gpu) == n                  # every GPU activity, once
        kernel_boxes = [b for b in gpu if b["category"] in ("compute", "nccl")]
        assert min(b["start_ns"] for b in kernel_boxes) == first + start - origin   # on the run clock
    # a zoomed window keeps the same lanes (stable catalogue), with fewer activities
    mid = (win["extent"][0] + win["extent"][1]) // 2
    zoom = client.get(f"/runs/{run_id}/timeline.json?buckets=300&start_ns={mid}&end_ns={mid + 1000}").get_json()
    assert [[lane["id"] for lane in g["lanes"]] for g in zoom["groups"]] == \
        [[lane["id"] for lane in g["lanes"]] for g in win["groups"]]
    assert zoom["activities"] < win["activities"]
    # the connections the timeline keeps open do not lock out the other routes reading the same files
    assert client.get(f"/runs/{run_id}/reports/{reports[0].id}/tables.json").status_code == 200
    assert client.get(f"/runs/{run_id}/reports/{reports[0].id}/timeline.json").status_code == 200
    assert client.get(f"/compare?a={run_id}&b={run_id}").status_code == 200
    assert client.get(f"/runs/{run_id}/timeline.json?end_ns=x").status_code == 400
    assert client.get("/runs/999999/timeline.json").status_code == 404


def test_selecting_an_nccl_kernel_finds_its_launch_and_the_collective_on_every_rank(client, db, settings,
                                                                                      ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(TORCHRUN)], job="torchrun")
    report = _reports(db, run_id)[0]
    con = _con(settings, report)
    # the 3rd SendRecv of pid 145, its launch, and the 3rd of pid 144 (COMM002's matching: name + order)
    name = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"
    rows = {pid: con.execute("SELECT start_ns, end_ns, device, stream, correlation_id FROM kernels WHERE pid = ? "
                             "AND name = ? ORDER BY start_ns LIMIT 1 OFFSET 2", [pid, name]).fetchone()
            for pid in (144, 145)}
    launch = con.execute("SELECT start_ns, name, tid FROM cuda_api WHERE pid = 145 AND correlation_id = ?",
                         [rows[145][4]]).fetchone()
    con.close()
    s, e, dev, stream, _ = rows[145]
    win = client.get(f"/runs/{run_id}/timeline.json?buckets=200").get_json()
    assert [g["pid"] for g in win["groups"]] == [144, 145]          # the export's two processes, one axis
    sel = client.get(f"/runs/{run_id}/timeline/select.json?report_id={report.id}&pid=145&device={dev}"
                     f"&stream={stream}&t_ns={(s + e) // 2}").get_json()
    assert sel["kernel"]["name"] == name and sel["kernel"]["start_ns"] == s
    assert sel["launch"]["start_ns"] == launch[0] and sel["launch"]["name"] == launch[1]
    assert sel["launch"]["lane_id"] == f"{report.id}:145:api:{launch[2]}"
    coll = sel["collective"]
    assert coll["occurrence"] == 2
    got = {i["pid"]: i["start_ns"] for i in coll["instances"]}
    assert got == {144: rows[144][0], 145: rows[145][0]}
    assert coll["skew_ns"] == abs(rows[144][0] - rows[145][0])
    lanes = {lane["id"] for g in win["groups"] for lane in g["lanes"]}
    assert all(i["lane_id"] in lanes for i in coll["instances"])


def test_merged_chrome_trace_has_one_process_per_rank(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="nccl")
    reports = _reports(db, run_id)
    kernels = 0
    for r in reports:
        con = _con(settings, r)
        kernels += con.execute("SELECT count(*) FROM kernels").fetchone()[0]
        con.close()
    resp = client.get(f"/runs/{run_id}/trace.json")
    assert "attachment" in resp.headers["Content-Disposition"]
    doc = json.loads(resp.get_data(as_text=True))
    events = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs.values()) == ["rank 0 (ault43)", "rank 1 (ault44)"]
    assert {e["pid"] for e in events if e["ph"] == "X"} == set(procs)     # only processes with events
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"} <= threads
    assert len([e for e in events if e["ph"] == "X" and e["cat"] in ("nccl", "compute")]) == kernels
    starts = {e["id"] for e in events if e["ph"] == "s"}
    ends = {e["id"] for e in events if e["ph"] == "f"}
    assert ends and ends <= starts                                       # each kernel's flow starts at its launch
    # a window export holds only what overlaps the window, and says so
    k = [e for e in events if e["ph"] == "X" and e["cat"] == "nccl"]
    t0 = int(k[-1]["ts"] * 1000)
    small = json.loads(client.get(f"/runs/{run_id}/trace.json?start_ns={t0}&end_ns={t0 + 10}").get_data(as_text=True))
    assert small["otherData"]["window_start_ns"] == t0
    assert 0 < len([e for e in small["traceEvents"] if e["ph"] == "X"]) < len([e for e in events if e["ph"] == "X"])


def test_findings_grouped_by_rule_with_the_rank_matrix(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="nccl")
    findings = list(db.scalars(sa.select(Finding).where(Finding.run_id == run_id)))
    # stored: one finding per rule and scope across the ranks; each rank's own in its report's summary
    rolled = [f for f in findings if "ranks_with_finding" in (f.extra or {})]
    assert rolled and all(f.report_id is None for f in rolled)
    own = {s.report_id: s.data["findings"] for s in db.scalars(sa.select(RunSummary).where(
        RunSummary.run_id == run_id, RunSummary.report_id.is_not(None)))}
    run_level = [f for f in findings if "ranks_with_finding" not in (f.extra or {})]
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert html.count('<details class="finding"') == sum(len(v) for v in own.values()) + len(run_level)
    rows = re.findall(r'class="rule-row[^"]*" data-rule="([A-Z]+\d+)"', html)
    assert sorted(rows) == sorted({f.rule_id for f in findings})
    # the matrix: one row per rank named "rank N · host · GPU d", cells = summed impact of that rule on that rank
    reports = _reports(db, run_id)
    labels = {r.id: f"rank {r.rank} · {r.host.split('.')[0]} · GPU 0" for r in reports}
    by_rank = {r.rank: labels[r.id] for r in reports}
    expected: dict[tuple[str, str], int] = {}
    for f in rolled:
        for p in f.extra["per_rank"]:
            expected[(by_rank[p["rank"]], f.rule_id)] = expected.get((by_rank[p["rank"]], f.rule_id), 0) + p["impact_ns"]
    for f in run_level:
        rank = labels.get(f.report_id) or next(v for k, v in labels.items() if v.startswith(f"rank {f.rank} "))
        expected[(rank, f.rule_id)] = expected.get((rank, f.rule_id), 0) + f.impact_ns
    # the roll-up is the reports' own findings summed by rule and phase
    summed: dict[tuple[str, str | None], int] = {}
    for items in own.values():
        for g in items:
            summed[(g["rule_id"], g.get("phase"))] = summed.get((g["rule_id"], g.get("phase")), 0) + g["impact_ns"]
    # (a start-up's impact is wall time on the aligned clock, issue #41; its sum over ranks stays beside)
    assert {(f.rule_id, f.extra.get("phase")): f.extra.get("impact_summed_ns", f.impact_ns) for f in rolled} == summed
    table = html[html.index('id="impact-matrix"'):html.index("</table>", html.index('id="impact-matrix"'))]
    cells = {}
    for rank, body in re.findall(r'<tr data-rank="([^"]+)">(.*?)</tr>', table, re.S):
        for rule, ns in re.findall(r'data-rule="([^"]+)" data-ns="(\d*)"', body):
            if ns:
                cells[(unescape(rank), rule)] = int(ns)
    assert cells == expected
    # evidence details read as numbers with units, never Python reprs
    assert "comm_ns=" not in html and "{&#39;" not in html
    assert re.search(r'<span class="kv">comm <b>[\d.]+ (ms|µs|s)</b></span>', html)


def test_a_rule_error_marks_the_run_ready_with_errors(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0)], job="nccl")
    run = db.get(Run, run_id)
    run.rule_statuses = [*run.rule_statuses, {"id": "GPU001", "status": "error", "findings": 0,
                                              "reason": "ZeroDivisionError: <b>division</b> by zero"}]
    db.commit()
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    banner = html[html.index('id="rule-errors"'):]
    banner = banner[:banner.index("</div>")]
    assert "Ready with errors" in banner and "GPU001" in banner and "&lt;b&gt;division&lt;/b&gt;" in banner
    detail = client.get(f"/api/v1/runs/{run_id}").get_json()
    assert detail["rule_errors"] == [{"id": "GPU001", "reason": "ZeroDivisionError: <b>division</b> by zero"}]
    job = client.get("/jobs/nccl").get_data(as_text=True)
    assert "ready with errors (1 rule)" in job and "GPU001: ZeroDivisionError: &lt;b&gt;" in job


def test_kernel_tables_share_short_names_folded_nvtx_and_the_rank_matrix(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(TORCHRUN), corpus_file(NCCL_R1)], job="mixed")
    reports = _reports(db, run_id)
    con = _con(settings, reports[0])
    total = con.execute("SELECT sum(end_ns - start_ns) FROM kernels").fetchone()[0]
    top = con.execute("SELECT name, sum(end_ns - start_ns) FROM kernels GROUP BY 1 ORDER BY 2 DESC LIMIT 1").fetchone()
    raw_nvtx = con.execute("SELECT count(DISTINCT text) FROM nvtx WHERE text LIKE '%op_id = %'").fetchone()[0]
    con.close()
    tables = client.get(f"/runs/{run_id}/reports/{reports[0].id}/tables.json").get_json()
    k = tables["kernels"][0]
    assert k["name"] == top[0] and k["short"] == "flash::flash_fwd_kernel<…>"
    assert abs(k["pct"] - 100.0 * top[1] / total) < 1e-9
    assert [x["total_ns"] for x in tables["kernels"]] == sorted((x["total_ns"] for x in tables["kernels"]), reverse=True)
    folded = [n["text"] for n in tables["nvtx"] if "op_id" in n["text"]]
    assert folded and all("op_id = N" in t for t in folded) and len(folded) < raw_nvtx
    matrix = client.get(f"/runs/{run_id}/kernels.json").get_json()
    assert len(matrix["ranks"]) == 2
    first = matrix["kernels"][0]
    assert first["name"] == top[0] and first["total_ns"] == [top[1], None]


def test_compare_defaults_to_the_previous_run_and_shows_deltas(client, db, settings, ingested) -> None:
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    older = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="cmp",
                           created_at=t0)
    base = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="cmp",
                          created_at=t0 + timedelta(days=1))
    head = seed.store_run(db, settings, ingested, [corpus_file(TORCHRUN)], job="cmp", created_at=t0 + timedelta(days=2))
    html = client.get(f"/compare?b={head}").get_data(as_text=True)
    assert f"against baseline <a href=\"/runs/{base}\">#{base}</a>" in html      # the previous run of the job
    assert f'<option value="{base}" selected>' in html and f'<option value="{older}">' in html
    totals = {r: client.get(f"/api/v1/runs/{r}/summary").get_json()["totals"] for r in (base, head)}
    rows = dict(re.findall(r'<tr data-key="(\w+)" data-base="[^"]*" data-head="[^"]*" data-delta="([^"]*)">', html))
    assert int(rows["span_ns"]) == totals[head]["span_ns"] - totals[base]["span_ns"]
    assert int(rows["comm_exposed_ns"]) == totals[head]["comm_exposed_ns"] - totals[base]["comm_exposed_ns"]
    assert abs(float(rows["goodput_pct"]) - (totals[head]["goodput_pct"] - totals[base]["goodput_pct"])) < 5e-4   # the API rounds to 3 decimals
    assert "points" in html
    assert "different numbers of nsys reports (2 and 1)" in html
    first = client.get(f"/compare?b={older}").get_data(as_text=True)
    assert "first run of its job" in first


def test_job_trends_tag_filter_and_metric_picker(client, db, settings, ingested) -> None:
    from datetime import UTC, datetime, timedelta

    from app.services.pages.web_jobs import job_trends

    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    ids = [seed.store_run(db, settings, ingested, [corpus_file(src)], job="trendy", git_sha=f"abcdef{i}123",
                          tags={"branch": "main" if i != 1 else "dev"}, created_at=t0 + timedelta(days=i))
           for i, src in enumerate([NCCL_R0, NCCL_R1, TORCHRUN])]
    assert [p.run_id for p in job_trends(db, "trendy", "branch=main").points] == [ids[0], ids[2]]
    assert [p.run_id for p in job_trends(db, "trendy", "branch").points] == ids
    html = client.get("/jobs/trendy?tag=branch%3Dmain").get_data(as_text=True)
    metrics = json.loads(unescape(re.search(r'id="trend-picked" data-metrics="([^"]+)"', html).group(1)))
    impacts = {}
    for f in db.scalars(sa.select(Finding).where(Finding.run_id.in_([ids[0], ids[2]]))):
        impacts.setdefault(f.rule_id, {}).setdefault(f.run_id, 0)
        impacts[f.rule_id][f.run_id] += f.impact_ns
    for rule, per_run in impacts.items():
        series = metrics[f"rule:{rule}"]
        # one point per run: that run's impact of the rule (0 where it did not fire), never a sum over runs
        assert [p["value"] for p in series["points"]] == [per_run.get(ids[0], 0), per_run.get(ids[2], 0)]
        assert [p["sha"] for p in series["points"]] == ["abcdef0", "abcdef2"]
    assert any(k.startswith("kernel:") for k in metrics)
    assert "median impact per run" in html


def test_rule_docs_rendered_with_anchors_and_404_keeps_the_navigation(client) -> None:
    html = client.get("/rules").get_data(as_text=True)
    assert 'id="rule-COMM002"' in html
    assert "<em>Why it matters</em>" in html and "*Why it matters*" not in html
    assert "<code>Run.offsets</code>" in html  # a code span of COMM002's doc
    missing = client.get("/runs/987654")
    assert missing.status_code == 404
    body = missing.get_data(as_text=True)
    assert 'id="not-found"' in body and 'href="/rules"' in body and "Run 987654 does not exist." in body
    assert client.get("/api/v1/runs/987654").get_json()["error"]["code"] == "RUN_NOT_FOUND"
    assert client.get("/api/v1/nope").get_json()["error"]["code"] == "NOT_FOUND"


def test_ncu_only_run_headline_is_what_ncu_measured(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("numba-copy-blocked-full.csv")], job="ncu-only")
    report = _reports(db, run_id)[0]
    assert report.kind == "ncu"
    con = _con(settings, report)
    kernels, total = con.execute("SELECT count(*), sum(duration_ns) FROM ncu_kernels").fetchone()
    con.close()
    findings = list(db.scalars(sa.select(Finding).where(Finding.run_id == run_id)))
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    from app.web.filters import fmt_ns, fmt_number

    kpis = html[html.index('id="ncu-kpis"'):html.index("</div>\n", html.index('id="ncu-kpis"') + 600)]
    assert f'<div class="v">{fmt_number(kernels)}</div><div class="k">kernels profiled' in kpis
    assert f'<div class="v">{fmt_ns(total)}</div><div class="k">profiled kernel time' in kpis
    saving = sum(f.impact_ns for f in findings)  # shared per kernel: at most the kernel's time
    assert saving <= total
    assert f'<div class="v">{fmt_ns(saving)}</div><div class="k">estimated saving' in kpis
    assert "goodput (compute share)" not in html
    assert "show-kernel" not in html                  # no nsys report to show the kernel in
    assert "see it on the timeline" not in html       # no timeline on an ncu-only page
    assert "127 ·" not in html and "127.0.0.1 ·" not in html  # host 127.0.0.1 names no rank and no machine
    tables = client.get(f"/runs/{run_id}/reports/{report.id}/tables.json").get_json()
    assert tables["kernels"][0]["total_ns"] == int(total) and tables["kernels"][0]["speedup_pct"] is not None


def test_run_timeline_carries_each_ranks_phases_and_window_on_the_run_clock(client, db, settings, ingested) -> None:
    from app.models import RunSummary

    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="nccl")
    win = client.get(f"/runs/{run_id}/timeline.json?buckets=300").get_json()
    offset = {g["report_id"]: g["offset_ns"] for g in win["groups"]}
    stored = dict(db.execute(sa.select(RunSummary.report_id, RunSummary.data).where(
        RunSummary.run_id == run_id, RunSummary.report_id.is_not(None))).all())
    assert [p["report_id"] for p in win["phases"]] == sorted(stored)
    for item in win["phases"]:
        data, off = stored[item["report_id"]], offset[item["report_id"]]
        assert data["phases"], "the analysis stored this report's phases"
        assert item["phases"] == [{"name": p["name"], "start_ns": p["start_ns"] + off, "end_ns": p["end_ns"] + off,
                                   "reason": p["reason"]} for p in data["phases"]]
        w = data["window"]
        assert item["window"]["phase"] == w["phase"] and item["window"]["spec"] == "steady"
        if w["start_ns"] is None:
            assert item["window"]["start_ns"] is item["window"]["end_ns"] is None
        else:
            assert (item["window"]["start_ns"], item["window"]["end_ns"]) == (w["start_ns"] + off, w["end_ns"] + off)
