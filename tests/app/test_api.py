"""The read side of /api/v1 over runs processed by the real pipeline and analysis (in-process, no Celery)."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from analysis.diagnosis.rules.registry import default_registry
from app.models import Run
from tests.app.conftest import process_run, queued
from tests.conftest import corpus_file

VECADD = corpus_file("vecadd-2026.sqlite")
R0 = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
R1 = corpus_file("nccl-ring-2node-r1-ault44.sqlite")


def upload(client, headers, paths, **fields):
    data = {**fields, "files": [(io.BytesIO(p.read_bytes()), p.name) for p in paths]}
    r = client.post("/api/v1/runs", headers=headers, data=data)
    assert r.status_code == 202, r.json
    return r.json["id"]


def test_processed_run_reports_findings_and_summary_match_the_analysis(client, auth, session, settings):
    run_id = upload(client, auth["write"], [R0, R1], job="nccl-ring", tag="nodes=2")
    result = process_run(settings, session, run_id)
    run = client.get(f"/api/v1/runs/{run_id}", headers=auth["read"]).json
    assert run["status"] == "ready" and run["analysis_status"] == "ready"
    assert [r["status"] for r in run["reports"]] == ["ready", "ready"]
    assert sorted(r["rank"] for r in run["reports"]) == sorted(i["rank"] for i in result["reports"])
    assert run["finding_count"] == len(result["findings"]) > 0
    assert [r["id"] for r in run["rules"]] == [r["id"] for r in result["rules"]]

    page = client.get(f"/api/v1/runs/{run_id}/findings?page_size=200", headers=auth["read"]).json
    assert page["total"] == len(result["findings"])
    # Ranked by impact; evidence-only findings (owns_idle False: HOST002) after those that own the time.
    ranked = [(_evidence_only(f), -f["impact_ns"]) for f in page["items"]]
    assert ranked == sorted(ranked)
    impacts = [f["impact_ns"] for f in page["items"]]
    assert sorted(impacts) == sorted(f["impact_ns"] for f in result["findings"])
    # Two ranks of one NCCL job: the run-level communication rules fire.
    assert any(f["rule_id"].startswith("COMM") for f in page["items"])
    first = page["items"][0]
    assert first["evidence"] == result["findings"][0]["evidence"]

    for severity in ("critical", "warning", "info"):
        want = sum(f["severity"] == severity for f in result["findings"])
        got = client.get(f"/api/v1/runs/{run_id}/findings?severity={severity}", headers=auth["read"]).json
        assert got["total"] == want and all(f["severity"] == severity for f in got["items"])
    rule = result["findings"][0]["rule_id"]
    got = client.get(f"/api/v1/runs/{run_id}/findings?rule={rule}", headers=auth["read"]).json
    assert got["total"] == sum(f["rule_id"] == rule for f in result["findings"])
    got = client.get(f"/api/v1/runs/{run_id}/findings?rank=1", headers=auth["read"]).json
    # rank 1's findings: run-level ones of rank 1 and those across the ranks with a part on rank 1
    want = [f for f in result["findings"] if (any(p["rank"] == 1 for p in f["per_rank"]) if "per_rank" in f
                                              else f["rank"] == 1)]
    assert got["total"] == len(want) > 0
    assert [(f["rule_id"], f["impact_ns"]) for f in got["items"]] == [(f["rule_id"], f["impact_ns"]) for f in want]
    one = client.get(f"/api/v1/runs/{run_id}/findings?rank=1&page_size=1&page=2", headers=auth["read"]).json
    assert one["total"] == len(want) and [f["rule_id"] for f in one["items"]] == [f["rule_id"] for f in want[1:2]]
    p1 = client.get(f"/api/v1/runs/{run_id}/findings?page_size=2&page=1", headers=auth["read"]).json
    p2 = client.get(f"/api/v1/runs/{run_id}/findings?page_size=2&page=2", headers=auth["read"]).json
    assert [f["id"] for f in p1["items"] + p2["items"]] == [f["id"] for f in page["items"][:4]]

    summary = client.get(f"/api/v1/runs/{run_id}/summary", headers=auth["read"]).json
    bds = [i["breakdown"] for i in result["reports"]]
    for key in ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns"):
        assert summary["totals"][key] == sum(b[key] for b in bds)
        assert sorted(r[key] for r in summary["reports"]) == sorted(b[key] for b in bds)
    assert summary["severity_counts"]["critical"] == sum(f["severity"] == "critical" for f in result["findings"])


def test_list_runs_filters_sort_and_pagination(client, auth, session):
    ids = {}
    for name, job, tags in (("a", "llama", ["team=x", "gpus=8"]), ("b", "llama", ["team=y"]),
                            ("c", "bert", ["team=x"])):
        ids[name] = client.post("/api/v1/runs", headers=auth["write"], json={"job": job, "tags": tags}).json["id"]
    ids["d"] = client.post("/api/v1/runs", headers=auth["admin"], json={"job": "bert"}).json["id"]
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for i, name in enumerate("abcd"):  # a is oldest
        session.execute(sa.update(Run).where(Run.id == ids[name]).values(created_at=base + timedelta(days=i)))
    session.commit()

    def names(query):
        r = client.get(f"/api/v1/runs?{query}", headers=auth["read"])
        assert r.status_code == 200, r.json
        back = {v: k for k, v in ids.items()}
        return [back[x["id"]] for x in r.json["items"]], r.json["total"]

    assert names("") == (["d", "c", "b", "a"], 4)
    assert names("sort=created_at") == (["a", "b", "c", "d"], 4)
    assert names("job=llama") == (["b", "a"], 2)
    assert names("tag=team=x") == (["c", "a"], 2)
    assert names("tag=team=x&tag=gpus=8") == (["a"], 1)
    assert names("submitter=t-admin") == (["d"], 1)
    assert names("created_after=2026-01-02T00:00:00Z&created_before=2026-01-04") == (["c", "b"], 2)
    assert names("status=queued") == (["d", "c", "b", "a"], 4)
    assert names("status=ready") == ([], 0)
    assert names("page_size=3&page=2") == (["a"], 4)
    assert names("job=nope") == ([], 0)


@pytest.mark.parametrize("query", ["page=0", "page_size=1000", "sort=bogus", "status=nope",
                                   "created_after=yesterday", "tag=novalue", "page=x"])
def test_bad_query_parameters_are_400(client, auth, query):
    r = client.get(f"/api/v1/runs?{query}", headers=auth["read"])
    assert (r.status_code, r.json["error"]["code"]) == (400, "VALIDATION_ERROR")
    assert set(r.json["error"]) == {"code", "message", "details"}


def test_jobs_history_and_compare(client, auth, session, settings):
    base = upload(client, auth["write"], [VECADD], job="bench", git_sha="aaaa111")
    head = upload(client, auth["write"], [R0], job="bench", git_sha="bbbb222")
    rb, rh = process_run(settings, session, base), process_run(settings, session, head)

    jobs = client.get("/api/v1/jobs", headers=auth["read"]).json
    assert [(j["name"], j["run_count"]) for j in jobs["items"]] == [("bench", 2)]
    hist = client.get("/api/v1/jobs/bench/history", headers=auth["read"]).json
    assert [p["run_id"] for p in hist["items"]] == [base, head]
    assert [p["span_ns"] for p in hist["items"]] == [rb["reports"][0]["breakdown"]["span_ns"],
                                                     rh["reports"][0]["breakdown"]["span_ns"]]
    assert [p["finding_count"] for p in hist["items"]] == [len(rb["findings"]), len(rh["findings"])]
    assert client.get("/api/v1/jobs/nope/history", headers=auth["read"]).json["error"]["code"] == "JOB_NOT_FOUND"

    cmp = client.get(f"/api/v1/compare?base={base}&head={head}", headers=auth["read"]).json
    b0, h0 = rb["reports"][0]["breakdown"], rh["reports"][0]["breakdown"]
    assert cmp["breakdown"]["compute_ns"] == {
        "base": b0["compute_ns"], "head": h0["compute_ns"], "delta": h0["compute_ns"] - b0["compute_ns"],
        "delta_pct": round(100.0 * (h0["compute_ns"] - b0["compute_ns"]) / b0["compute_ns"], 3)}
    # Different programs: vecadd's kernel disappears entirely, NCCL kernels appear.
    vec = next(k for k in cmp["kernels"] if k["name"] == rb["reports"][0]["top_kernels"][0]["name"])
    assert vec["status"] == "gone" and vec["head_count"] == 0 and vec["base_total_ns"] > 0
    assert {f["rule_id"] for f in cmp["new_findings"]} <= {f["rule_id"] for f in rh["findings"]}
    assert len(cmp["new_findings"]) + len(cmp["resolved_findings"]) > 0

    same = client.get(f"/api/v1/compare?base={base}&head={base}", headers=auth["read"]).json
    assert same["kernels"] == [] and same["new_findings"] == [] and same["resolved_findings"] == []
    assert all(v["delta"] in (0, 0.0) for v in same["breakdown"].values())
    assert client.get(f"/api/v1/compare?base={base}", headers=auth["read"]).status_code == 400
    assert client.get(f"/api/v1/compare?base={base}&head=99999", headers=auth["read"]).status_code == 404


def test_delete_hides_the_run_and_enqueues_purge(client, auth, broker):
    run = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j"}).json["id"]
    assert client.delete(f"/api/v1/runs/{run}", headers=auth["write"]).json == {"id": run, "status": "deleted"}
    assert queued(broker, "light") == [{"task": "purge.run", "args": [run]}]
    assert client.get(f"/api/v1/runs/{run}", headers=auth["read"]).status_code == 404
    assert client.get("/api/v1/runs", headers=auth["read"]).json["total"] == 0
    assert client.delete(f"/api/v1/runs/{run}", headers=auth["write"]).status_code == 404


def test_rules_catalogue_is_the_registry(client, auth):
    """The nsys and ncu registry in its order, then the NET rules over NCCL logs (their own registry)."""
    from analysis.diagnosis.nccl import registry as net_registry

    items = client.get("/api/v1/rules", headers=auth["read"]).json["items"]
    assert [r["id"] for r in items] == default_registry().ids() + net_registry().ids()
    assert {r["tool"] for r in items} == {"nsys", "ncu", "nccl"}
    assert all(r["doc"] and "thresholds" in r for r in items)


def test_health_reports_db_and_broker(client, settings):
    assert client.get("/api/v1/health").json == {"status": "ok", "database": True, "broker": True}


def test_health_degraded_when_broker_unreachable(settings):
    from dataclasses import replace

    from app import create_app

    app = create_app(replace(settings, broker_url="redis://127.0.0.1:1/0"))
    try:
        r = app.test_client().get("/api/v1/health")
        assert r.status_code == 503 and r.json == {"status": "degraded", "database": True, "broker": False}
    finally:
        app.extensions["goodput.engine"].dispose()


def test_unexpected_error_is_500_with_a_request_id_and_no_traceback(settings):
    from app import create_app

    app = create_app(settings)
    app.add_url_rule("/api/v1/boom", "boom", lambda: 1 / 0)
    try:
        r = app.test_client().get("/api/v1/boom")
        assert r.status_code == 500 and r.json["error"]["code"] == "INTERNAL"
        rid = r.json["error"]["details"]["request_id"]
        assert len(rid) == 32 and rid in r.json["error"]["message"]
        assert "ZeroDivision" not in r.get_data(as_text=True)
    finally:
        app.extensions["goodput.engine"].dispose()


@pytest.mark.parametrize(("path", "status", "code"), [
    ("/api/v1/runs/99999999999999999999", 404, "NOT_FOUND"), ("/api/v1/runs/2147483648/findings", 404, "NOT_FOUND"),
    ("/api/v1/compare?base=1&head=99999999999", 400, "VALIDATION_ERROR")])
def test_ids_beyond_the_column_range_are_not_found_or_invalid(client, auth, path, status, code):
    # In the path an id no row can have names nothing (404, tests/web/test_ids.py covers every route); in the
    # query it is a parameter out of its documented range.
    r = client.get(path, headers=auth["read"])
    assert (r.status_code, r.json["error"]["code"]) == (status, code)


def test_get_session_works_in_an_app_context_without_a_request(app):
    from app.db import get_session

    with app.app_context():
        assert get_session().execute(sa.text("SELECT 1")).scalar() == 1


def _evidence_only(f: dict) -> bool:
    return (f["owns_idle"] if "owns_idle" in f else (f.get("extra") or {}).get("owns_idle")) is False


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01", "0001-01-01T00:00:00",
                                   "9999-12-31T23:59:59.999999+00:00", "0001-01-01T00:00:00-14:00",
                                   "9999-12-31T23:59:59+14:00"])
def test_date_filters_take_the_full_range_or_answer_400(client, auth, value):
    client.post("/api/v1/runs", headers=auth["write"], json={"job": "j"})
    for name in ("created_after", "created_before"):
        r = client.get("/api/v1/runs", headers=auth["read"], query_string={name: value})
        assert r.status_code in (200, 400), (name, value, r.status_code)
        if r.status_code == 400:
            assert "outside 0001-01-01 to 9999-12-31" in r.json["error"]["message"]
        else:
            assert r.json["total"] == (1 if (name == "created_after") == value.startswith("0001") else 0)
