"""Threshold overrides on upload: checked against the rule catalogue like the CLI's --threshold,
recorded on the run (its goodput.thresholds tag), used by its analysis and by a re-analysis; a bad one is a
400 naming it, and nothing is created."""

from __future__ import annotations

import io

import sqlalchemy as sa

from tests.app.conftest import process_run
from tests.conftest import corpus_file

CUPY = corpus_file("cupy-power-iteration.sqlite")


def _runs(session) -> int:
    from app.models import Run

    return session.scalar(sa.select(sa.func.count()).select_from(Run))


def _gap_findings(client, auth, run_id):
    items = client.get(f"/api/v1/runs/{run_id}/findings?page_size=200", headers=auth["read"]).json["items"]
    return [f for f in items if f["rule_id"] == "GPU001"]


def test_threshold_overrides_are_recorded_and_change_the_analysis(client, auth, session, settings):
    base = client.post("/api/v1/runs", headers=auth["write"],
                       data={"job": "t", "files": [(io.BytesIO(CUPY.read_bytes()), CUPY.name)]}).json["id"]
    process_run(settings, session, base)
    assert _gap_findings(client, auth, base), "the default GPU001 threshold finds idle gaps in this export"

    # Multipart: one field per override (like tags); a gap threshold above any gap leaves no GPU001 finding.
    r = client.post("/api/v1/runs", headers=auth["write"],
                    data={"job": "t", "threshold": ["GPU001.min_gap_us=1e9", "COMM002.min_skew_us=50"],
                          "files": [(io.BytesIO(CUPY.read_bytes()), CUPY.name)]})
    assert r.status_code == 202, r.json
    run_id = r.json["id"]
    assert r.json["tags"] == {"goodput.thresholds": "COMM002.min_skew_us=50 GPU001.min_gap_us=1e+09"}
    result = process_run(settings, session, run_id)
    assert not [f for f in result["findings"] if f["rule_id"] == "GPU001"]
    assert not _gap_findings(client, auth, run_id)
    assert next(x for x in result["rules"] if x["id"] == "GPU001")["status"] == "ok"

    # A re-analysis with another window keeps the run's overrides.
    assert client.post(f"/api/v1/runs/{run_id}/analysis", headers=auth["write"],
                       json={"window": "all"}).status_code == 202
    again = process_run(settings, session, run_id)
    assert again["window"] == "all" and not [f for f in again["findings"] if f["rule_id"] == "GPU001"]


def test_json_metadata_takes_thresholds_as_a_list_or_an_object(client, auth):
    a = client.post("/api/v1/runs", headers=auth["write"], json={"job": "t", "thresholds": ["GPU001.min_gap_us=200"]})
    b = client.post("/api/v1/runs", headers=auth["write"], json={"job": "t", "thresholds": {"GPU001.min_gap_us": 200}})
    assert a.status_code == b.status_code == 202
    assert a.json["tags"] == b.json["tags"] == {"goodput.thresholds": "GPU001.min_gap_us=200"}


def test_bad_thresholds_are_refused_and_nothing_is_created(client, auth, session):
    before = _runs(session)
    cases = {
        "GPU999.min_gap_us=1": "unknown rule GPU999",
        "GPU001.no_such=1": "rule GPU001 has no threshold 'no_such'",
        "GPU001.min_gap_us=lots": "GPU001.min_gap_us must be a number from 0 to 100,000,000,000 us; got lots",
        "GPU001.min_gap_us=nan": "GPU001.min_gap_us must be a number from 0 to 100,000,000,000 us; got nan",
        # In form but out of range: refused before anything is stored, naming the field and its range.
        "GPU001.min_gap_us=1e308": "GPU001.min_gap_us must be a number from 0 to 100,000,000,000 us",
        "KRN003.min_instances=2.5": "KRN003.min_instances must be a whole number from 1 to 1,000,000,000",
        "MEM005.host_link_gbps=5e-324": "MEM005.host_link_gbps must be a number from 0.001 to 100,000 GB/s (or 0)",
        "COMM002.min_skew_us=-1e308": "COMM002.min_skew_us must be a number from 0 to 100,000,000,000 us",
        "min_gap_us=5": "must look like RULE.name",
    }
    for item, reason in cases.items():
        r = client.post("/api/v1/runs", headers=auth["write"],
                        data={"job": "t", "threshold": item, "files": [(io.BytesIO(CUPY.read_bytes()), CUPY.name)]})
        assert r.status_code == 400 and r.json["error"]["code"] == "VALIDATION_ERROR", (item, r.json)
        assert reason in r.json["error"]["details"]["fields"]["thresholds"], (item, r.json)
    # The reserved tag is checked the same way; JSON of the wrong shape is refused.
    r = client.post("/api/v1/runs", headers=auth["write"], json={"job": "t", "tags": ["goodput.thresholds=GPU001.x=1"]})
    assert r.status_code == 400 and "thresholds" in r.json["error"]["details"]["fields"]
    r = client.post("/api/v1/runs", headers=auth["write"], json={"job": "t", "thresholds": "GPU001.min_gap_us=1"})
    assert r.status_code == 400
    r = client.post("/api/v1/runs", headers=auth["write"], json={"job": "t", "thresholds": {"GPU001.min_gap_us": True}})
    assert r.status_code == 400
    session.expire_all()
    assert _runs(session) == before


def test_the_rule_catalogue_gives_each_thresholds_type_and_range(client, auth):
    from analysis.diagnosis.rules.registry import default_registry

    items = {r["id"]: r for r in client.get("/api/v1/rules", headers=auth["read"]).json["items"]}
    for rule in default_registry():
        for name, t in rule.thresholds.items():
            shown = items[rule.id]["thresholds"][name]
            assert (shown["type"], shown["minimum"], shown["maximum"], shown["range"]) == (
                t.kind, t.minimum, t.maximum, t.range_text())


def test_an_override_recorded_before_ranges_existed_is_left_out_not_fatal(caplog):
    """A run stored with a value now out of range (``MEM005.host_link_gbps=5e-324`` made Infinity) is analysed
    with the threshold's default, the others kept; the analysis does not fail on it every time."""
    from app.services.jobs.runs import THRESHOLDS_TAG, run_thresholds

    tags = {THRESHOLDS_TAG: "MEM005.host_link_gbps=5e-324 GPU001.min_gap_us=200 GPU001.min_gap_us2=1 GPU999.x=1"}
    assert run_thresholds(tags) == {"GPU001.min_gap_us": 200.0}
    assert "MEM005.host_link_gbps must be a number from 0.001" in caplog.text
