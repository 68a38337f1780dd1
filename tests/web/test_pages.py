"""The UI's pages through Flask's test client: auth and CSRF, headers, escaping, and numbers equal to queries."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import duckdb
import pytest
import sqlalchemy as sa

from app.models import Finding, Report, Run, RunSummary
from app.services.jobs import pipeline
from tests.analysis.timeline_wire import box_records
from tests.conftest import corpus_file
from tests.web import seed
from tests.web.conftest import PASSWORD, csrf_of, page_csrf

NCCL_R0, NCCL_R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"
PAGES = ("/", "/upload", "/rules", "/tokens", "/compare")


@pytest.mark.parametrize("path", PAGES)
def test_pages_need_a_session(app, path) -> None:
    resp = app.test_client().get(path)
    assert resp.status_code == 302 and resp.headers["Location"].startswith("/login?next=")


def test_login_requires_the_form_csrf_token(app, user) -> None:
    c = app.test_client()
    c.get("/login")
    resp = c.post("/login", data={"username": "alice", "password": PASSWORD})
    assert resp.status_code == 400
    resp = c.post("/login", data={"username": "alice", "password": PASSWORD, "csrf_token": "forged"})
    assert resp.status_code == 400
    token = csrf_of(c.get("/login").get_data(as_text=True))
    resp = c.post("/login", data={"username": "alice", "password": "nope", "csrf_token": token})
    assert resp.status_code == 401 and "wrong password" in resp.get_data(as_text=True)


def test_login_redirects_only_to_local_paths(app, user) -> None:
    c = app.test_client()
    token = csrf_of(c.get("/login").get_data(as_text=True))
    resp = c.post("/login?next=//evil.example/x", data={"username": "alice", "password": PASSWORD,
                                                        "csrf_token": token})
    assert resp.headers["Location"] == "/"


def test_session_cookie_and_security_headers(app, user) -> None:
    c = app.test_client()
    resp = c.get("/login")
    token = csrf_of(resp.get_data(as_text=True))
    resp = c.post("/login", data={"username": "alice", "password": PASSWORD, "csrf_token": token})
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    page = c.get("/")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    html = page.get_data(as_text=True)
    assert "<script>" not in html and " onclick=" not in html and " style=" not in html


def test_logout_is_a_csrf_protected_post(client) -> None:
    assert client.post("/logout", data={}).status_code == 400
    assert client.post("/logout", data={"csrf_token": page_csrf(client)}).status_code == 302
    assert client.get("/").status_code == 302


def test_tokens_create_list_revoke(client, db) -> None:
    token = page_csrf(client)
    html = client.post("/tokens", data={"action": "create", "name": "ci", "scope": "read",
                                        "csrf_token": token}).get_data(as_text=True)
    assert 'id="new-token-value">gp_' in html
    # a non-admin user cannot mint admin tokens
    html = client.post("/tokens", data={"action": "create", "name": "x", "scope": "admin",
                                        "csrf_token": token}).get_data(as_text=True)
    assert "only administrators" in html
    from app.services.accounts.tokens import create_token

    admin_token = create_token(db, "admin-made", "admin")
    html = client.post("/tokens", data={"action": "revoke", "token_id": str(admin_token.id),
                                        "csrf_token": token}).get_data(as_text=True)
    assert "only administrators can revoke" in html
    assert client.post("/tokens", data={"action": "revoke", "token_id": "1"}).status_code == 400  # no CSRF
    resp = client.post("/tokens", data={"action": "revoke", "token_id": "1", "csrf_token": token},
                       follow_redirects=True)
    assert "revoked" in resp.get_data(as_text=True)


@pytest.fixture
def nccl_run(db, settings, ingested) -> int:
    return seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="nccl",
                          tags={"nodes": "2"}, git_sha="deadbeef")


BOTH = pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)


@BOTH
def test_runs_list_headline_numbers_equal_the_traces(client, db, settings, nccl_run) -> None:
    html = client.get("/?job=nccl").get_data(as_text=True)
    assert f'data-run-id="{nccl_run}"' in html
    span = compute = comm = 0
    for report in db.scalars(sa.select(Report).where(Report.run_id == nccl_run)):
        con = duckdb.connect(str(pipeline.data_path(settings, report.trace_path)), read_only=True)
        # The headline numbers are the analysis window's: these one-shot ranks' work phase (their AllReduce,
        # after communicator set-up).
        w = db.scalar(sa.select(RunSummary.data).where(RunSummary.report_id == report.id))["window"]
        lo, hi = w["start_ns"], w["end_ns"]
        # direct per-device spans: first start to last end of GPU work in the window, summed over devices
        span += con.execute("""SELECT sum(e - s) FROM (SELECT pid, device, min(greatest(start_ns, $lo)) s,
            max(least(end_ns, $hi)) e FROM (
            SELECT pid, device, start_ns, end_ns FROM kernels UNION ALL SELECT pid, device, start_ns, end_ns FROM memcpy
            UNION ALL SELECT pid, device, start_ns, end_ns FROM memset) WHERE start_ns < $hi AND end_ns > $lo
            GROUP BY pid, device)""", {"lo": lo, "hi": hi}).fetchone()[0]
        comm += con.execute("SELECT coalesce(sum(least(end_ns, $hi) - greatest(start_ns, $lo)), 0) FROM kernels "
                            "WHERE category = 'nccl' AND start_ns < $hi AND end_ns > $lo", {"lo": lo, "hi": hi}).fetchone()[0]
        compute += con.execute("SELECT coalesce(sum(end_ns - start_ns), 0) FROM kernels WHERE category = 'compute'"
                               ).fetchone()[0]
        con.close()
    from app.web.filters import fmt_ns, fmt_pct

    assert fmt_ns(span) in html
    # no compute kernels in these NCCL-only exports: every NCCL ns is exposed, goodput is 0
    assert compute == 0 and fmt_ns(comm) in html and fmt_pct(0.0) in html
    critical = db.scalar(sa.select(sa.func.count()).select_from(Finding).where(
        Finding.run_id == nccl_run, Finding.severity == "critical"))
    assert f'<span class="badge critical">{critical}</span>' in html


@BOTH
def test_runs_list_filters_sort_and_paginate(client, db) -> None:
    from app.models import Job

    job_a, job_b = Job(name="alpha"), Job(name="beta")
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(30):
        db.add(Run(job=job_a if i % 2 else job_b, tags={"parity": "odd" if i % 2 else "even", "i": str(i)},
                   submitter="bob" if i < 10 else "carol", created_at=base + timedelta(days=i),
                   status="ready" if i % 3 else "failed"))
    db.commit()

    def ids(query: str) -> list[int]:
        import re

        return [int(x) for x in re.findall(r'data-run-id="(\d+)"', client.get(query).get_data(as_text=True))]

    all_ids = [r.id for r in db.scalars(sa.select(Run).order_by(Run.created_at.desc()))]
    assert ids("/?page_size=25") == all_ids[:25]
    assert ids("/?page_size=25&page=2") == all_ids[25:]
    assert ids("/?order=asc&page_size=100") == all_ids[::-1]
    expected = {r.id for r in db.scalars(sa.select(Run).join(Job).where(Job.name == "alpha", Run.submitter == "carol"))}
    assert set(ids("/?job=alpha&submitter=carol&page_size=100")) == expected
    assert set(ids("/?tag=parity=even&page_size=100")) == {r.id for r in db.scalars(sa.select(Run)) if r.tags["parity"] == "even"}
    assert set(ids("/?tag=i&page_size=100")) == set(all_ids)
    assert set(ids("/?status=failed&page_size=100")) == {r.id for r in db.scalars(sa.select(Run).where(Run.status == "failed"))}
    window = {r.id for r in db.scalars(sa.select(Run)) if base + timedelta(days=5) <= r.created_at < base + timedelta(days=8)}
    assert set(ids("/?from=2026-01-06&to=2026-01-08&page_size=100")) == window
    assert ids("/?sort=job&order=asc&page_size=100")[:15] == [
        r.id for r in db.scalars(sa.select(Run).join(Job).where(Job.name == "alpha").order_by(Run.id))]


def test_run_page_escapes_trace_strings(client, db, settings, ingested, tmp_path) -> None:
    evil = seed.xss_export(corpus_file("cupy-power-iteration.sqlite"), tmp_path / "evil.sqlite")
    run_id = seed.store_run(db, settings, ingested, [evil], job=f"j{seed.XSS_IMG}", tags={"t": seed.XSS_SCRIPT})
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert seed.XSS_SCRIPT not in html and seed.XSS_IMG not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    report = db.scalar(sa.select(Report).where(Report.run_id == run_id))
    tables = client.get(f"/runs/{run_id}/reports/{report.id}/tables.json").get_json()
    assert any(k["name"].startswith(seed.XSS_SCRIPT) for k in tables["kernels"])
    # the runs list and the job page escape the tag and job name too
    for path in ("/", f"/jobs/j{seed.XSS_IMG}"):
        page = client.get(path)
        assert page.status_code == 200
        body = page.get_data(as_text=True)
        assert seed.XSS_IMG not in body and seed.XSS_SCRIPT not in body


def test_run_page_sections(client, db, nccl_run) -> None:
    html = client.get(f"/runs/{nccl_run}").get_data(as_text=True)
    findings = list(db.scalars(sa.select(Finding).where(Finding.run_id == nccl_run)))
    # one row per rule, the rows ranked by their largest per-rank impact
    rows = [int(x) for x in __import__("re").findall(r'class="rule-row[^"]*" data-rule="[^"]+" data-ranks="[^"]*" '
                                                       r'data-severity="\w+" data-impact-ns="(\d+)"', html)]
    assert len(rows) == len({f.rule_id for f in findings}) and rows == sorted(rows, reverse=True)
    assert 'id="breakdown" data-breakdown="[' in html and 'id="timeline"' in html
    # each rank's own findings (its summary's) under its rule's row, and the run-level ones
    own = sum(len(d.get("findings") or []) for d in db.scalars(sa.select(RunSummary.data).where(
        RunSummary.run_id == nccl_run, RunSummary.report_id.is_not(None))))
    assert own and html.count('class="finding"') == own + sum(
        "ranks_with_finding" not in (f.extra or {}) for f in findings)
    assert client.get("/runs/999999").status_code == 404


def test_timeline_and_tables_routes(client, db, settings, nccl_run) -> None:
    report = db.scalar(sa.select(Report).where(Report.run_id == nccl_run).order_by(Report.id))
    base = f"/runs/{nccl_run}/reports/{report.id}"
    win = client.get(f"{base}/timeline.json?buckets=100").get_json()
    con = duckdb.connect(str(pipeline.data_path(settings, report.trace_path)), read_only=True)
    kernels = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    memcpy = con.execute("SELECT count(*) FROM memcpy").fetchone()[0]
    memset = con.execute("SELECT count(*) FROM memset").fetchone()[0]
    con.close()
    gpu = [b for lane in win["lanes"] if lane["kind"] == "gpu" for b in box_records(lane["boxes"])]
    assert sum(b["count"] for b in gpu) == kernels + memcpy + memset
    assert all(len(lane["boxes"]["rows"]) <= 100 * 4 for lane in win["lanes"])
    assert client.get(f"{base}/timeline.json?start_ns=abc").status_code == 400
    assert client.get(f"/runs/{nccl_run}/reports/999/timeline.json").status_code == 404
    tables = client.get(f"{base}/tables.json").get_json()
    assert sum(k["count"] for k in tables["kernels"]) == kernels
    trace = client.get(f"{base}/trace.json")
    assert "attachment" in trace.headers["Content-Disposition"]
    doc = json.loads(trace.get_data(as_text=True))
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] in ("nccl", "compute")]) == kernels


def test_findings_downloads_are_injection_safe(client, db, nccl_run) -> None:
    finding = db.scalar(sa.select(Finding).where(Finding.run_id == nccl_run).order_by(Finding.position))
    finding.title = "=HYPERLINK(\"http://evil\")"
    db.commit()
    text = client.get(f"/runs/{nccl_run}/findings.csv").get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["title"] == "'=HYPERLINK(\"http://evil\")"
    assert all(not r[c].startswith(("=", "+", "@")) for r in rows for c in r)
    # In the analysis' ranking (by impact; evidence-only HOST002 after the findings that own the time).
    ranked = db.scalars(sa.select(Finding.impact_ns).where(Finding.run_id == nccl_run).order_by(Finding.position))
    assert [int(r["impact_ns"]) for r in rows] == list(ranked)
    # One row per rule and scope across the two ranks, each rank's part in per_rank (summing to the row).
    stored = db.scalars(sa.select(Finding).where(Finding.run_id == nccl_run).order_by(Finding.position)).all()
    assert [json.loads(r["per_rank"]) if r["per_rank"] else None for r in rows] == [
        [{k: p[k] for k in ("rank", "host", "impact_ns")} for p in f.extra["per_rank"]] if "per_rank" in f.extra
        else None for f in stored]
    assert any(r["per_rank"] for r in rows)
    # per rank sums to the row, except a start-up: wall time on the aligned clock, once (issue #41)
    summed = [int(f.extra.get("impact_summed_ns", f.impact_ns)) for f in stored]
    assert all(sum(p["impact_ns"] for p in json.loads(r["per_rank"])) == summed[i]
               for i, r in enumerate(rows) if r["per_rank"])
    assert all(int(r["impact_ns"]) <= summed[i] for i, r in enumerate(rows))
    body = client.get(f"/runs/{nccl_run}/findings.json").get_json()
    assert body["findings"][0]["title"] == finding.title and len(body["findings"]) == len(rows)


def test_compare_and_job_pages(client, db, settings, ingested) -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    srcs = [NCCL_R0, NCCL_R0, NCCL_R0, "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"]
    ids = [seed.store_run(db, settings, ingested, [corpus_file(s)], job="trend", created_at=start + timedelta(days=i))
           for i, s in enumerate(srcs)]
    html = client.get(f"/compare?a={ids[0]}&b={ids[3]}").get_data(as_text=True)
    assert html.count("data-breakdown=") == 2 and 'id="kernel-diff"' in html
    assert client.get(f"/compare?a={ids[0]}&b=999999").status_code == 404
    from app.services.pages.web_jobs import job_trends

    trends = job_trends(db, "trend")
    assert [p.run_id for p in trends.points] == ids
    # the first three runs are identical: nothing regressed among them
    assert [p.regressed for p in trends.points[:3]] == [[], [], []]
    # the last one has twice their exposed communication (and a higher goodput: not a regression there)
    last, first = trends.points[3], trends.points[0]
    assert last.exposed_comm_ns > 1.1 * first.exposed_comm_ns and last.goodput_pct > first.goodput_pct
    # The NCCL runs are one-shot: their window is the work (the AllReduce), far shorter than torchrun's steady
    # loop, so the time regressed too.
    assert last.regressed_on == ["time", "comm"]
    page = client.get("/jobs/trend").get_data(as_text=True)
    assert page.count("data-trend=") == 3
    assert client.get("/jobs/nope").status_code == 404


def test_kernel_lookup_and_job_completion(client, db, settings, nccl_run) -> None:
    report = db.scalar(sa.select(Report).where(Report.run_id == nccl_run).order_by(Report.id))
    con = duckdb.connect(str(pipeline.data_path(settings, report.trace_path)), read_only=True)
    name, start = con.execute("SELECT name, min(start_ns) FROM kernels GROUP BY name LIMIT 1").fetchone()
    con.close()
    found = client.get(f"/runs/{nccl_run}/kernel.json?name={name}").get_json()
    hit = next(r for r in found["reports"] if r["report_id"] == report.id)
    assert hit["count"] >= 1 and hit["first"][0]["start_ns"] == start
    assert client.get(f"/runs/{nccl_run}/kernel.json?name=nope").get_json()["reports"] == []
    assert client.get("/jobs.json?q=nc").get_json()["items"] == ["nccl"]
    assert client.get("/jobs.json?q=zz").get_json()["items"] == []
    upload = client.get("/upload").get_data(as_text=True)
    assert 'data-api="/api/v1/runs"' in upload and '<option value="nccl">' in upload


def test_run_page_window_form_reanalyzes(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("cupy-power-iteration.sqlite")])
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="window-form"' in html and 'name="window" value="steady"' in html
    token = csrf_of(html)
    bad = client.post(f"/runs/{run_id}/analysis", data={"window": "time:5-1", "csrf_token": token})
    assert bad.status_code == 302
    assert "not one of steady" in client.get(f"/runs/{run_id}").get_data(as_text=True)
    # A window the stored report does not have: the form says what it has, and nothing is queued.
    trace = db.scalar(sa.select(Report.trace_path).where(Report.run_id == run_id))
    con = duckdb.connect(str(pipeline.data_path(settings, trace)), read_only=True)
    n = con.execute("SELECT count(*) FROM iterations").fetchone()[0]
    con.close()
    bad = client.post(f"/runs/{run_id}/analysis", data={"window": f"iterations:0-{n}", "csrf_token": token})
    assert bad.status_code == 302
    assert f"({n} found; valid: iterations:A-B with 0 &lt;= A &lt;= B &lt;= {n - 1})" in client.get(
        f"/runs/{run_id}").get_data(as_text=True)
    db.expire_all()
    assert db.get(Run, run_id).analysis_window != f"iterations:0-{n}"
    assert client.post(f"/runs/{run_id}/analysis", data={"window": "all"}).status_code == 400  # no CSRF token
    resp = client.post(f"/runs/{run_id}/analysis", data={"window": "all", "csrf_token": token})
    assert resp.status_code == 302 and resp.headers["Location"].endswith(f"/runs/{run_id}")
    db.expire_all()
    run = db.get(Run, run_id)
    assert (run.analysis_window, run.analysis_status) == ("all", "queued")
    seed.finish_analysis(db, settings, run_id)
    summary = db.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id, RunSummary.report_id.is_not(None)))
    assert summary.data["window"]["phase"] == "all"
    assert 'name="window" value="all"' in client.get(f"/runs/{run_id}").get_data(as_text=True)


def test_run_page_iterations_and_per_step_impacts(client, db, settings, ingested) -> None:
    """The run page's iteration section (step-time distribution, the slowest steps with the rule
    owning their extra time) and the findings' impact per step on the steady window."""
    import re

    from app.web.filters import fmt_ns

    run_id = seed.store_run(db, settings, ingested, [corpus_file("cupy-power-iteration.sqlite")], job="loop")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    report = db.scalar(sa.select(Report).where(Report.run_id == run_id))
    data = db.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id, RunSummary.report_id == report.id)).data
    it, ana = data["iterations"], data["iterations"]["anatomy"]
    section = html[html.index('<div id="iterations">'):html.index("Findings, ranked by impact")]
    for q, key in (("p10", "p10_ns"), ("median", "median_ns"), ("p90", "p90_ns"), ("p99", "p99_ns")):
        assert f'data-q="{q}" data-ns="{it["iteration_time"][key]}">{fmt_ns(it["iteration_time"][key])}<' in section
    slow = ana["slowest_steps"]
    assert slow and section.count('<tr data-index="') == len(slow)
    top = slow[0]
    assert f'<tr data-index="{top["index"]}"><td class="num">{top["index"]}</td><td class="num">{fmt_ns(top["ns"])}</td>' in section
    assert top["owner"] == "GPU001" and '#rule-GPU001"><code>GPU001</code></a>' in section
    assert f"{ana['steady_count']} in the analysis window" in section
    findings = list(db.scalars(sa.select(Finding).where(Finding.run_id == run_id)))
    gpu = next(f for f in findings if f.rule_id == "GPU001")
    per_step, n = gpu.extra["impact_per_step_ns"], gpu.extra["steps_in_window"]
    assert n == ana["steady_count"] and per_step == round(gpu.impact_ns / n)
    assert re.search(rf'title="{re.escape(fmt_ns(gpu.impact_ns))} over the {n} steps of the window">'
                     rf"{re.escape(fmt_ns(per_step))} per step</span>", html)


def test_run_page_has_a_step_time_table_per_loop(client, db, settings, ingested) -> None:
    """A report with two loops one after the other (the clue export: non-tiled then tiled kernels) shows
    each loop's step times, in time order, the main one marked."""
    from app.web.filters import fmt_ns

    run_id = seed.store_run(db, settings, ingested, [corpus_file("clue-um-t4.sqlite")], job="loops")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    report = db.scalar(sa.select(Report).where(Report.run_id == run_id))
    data = db.scalar(sa.select(RunSummary).where(RunSummary.run_id == run_id, RunSummary.report_id == report.id)).data
    loops = data["iterations"]["loops"]
    assert len(loops) == 2
    table = html[html.index('<table class="loops">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr data-loop=") == 2
    for lp in loops:
        assert f'<td class="num">{lp["count"]}</td>' in table and fmt_ns(lp["median_ns"]) in table
    main = next(lp for lp in loops if lp["main"])
    assert f'<tr data-loop="{main["index"]}" class="main-loop">' in table
