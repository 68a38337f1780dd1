"""The run timeline's overview files through the web routes: built on first use beside each report's
DuckDB file, then used for the whole-run window with the same activities as the exact window."""

from __future__ import annotations

import sqlalchemy as sa

from analysis.views import run_overview
from app.models import Report
from app.services.jobs import pipeline
from app.services.pages import web_timeline
from tests.analysis.timeline_wire import box_records
from tests.conftest import corpus_file
from tests.web import seed

NCCL_R0, NCCL_R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"


def test_overview_is_built_once_beside_the_report_and_keeps_every_activity(client, db, settings, ingested,
                                                                           monkeypatch) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="ov")
    paths = [pipeline.data_path(settings, r.trace_path)
             for r in db.scalars(sa.select(Report).where(Report.run_id == run_id))]
    files = [run_overview.overview_path(p) for p in paths]
    assert not any(f.exists() for f in files)
    monkeypatch.setattr(web_timeline, "USE_OVERVIEW", False)
    exact = client.get(f"/runs/{run_id}/timeline.json?buckets=400").get_json()
    assert not any(f.exists() for f in files)
    monkeypatch.setattr(web_timeline, "USE_OVERVIEW", True)
    fast = client.get(f"/runs/{run_id}/timeline.json?buckets=400").get_json()
    assert all(f.is_file() and f.parent == p.parent for f, p in zip(files, paths, strict=True))
    stamps = [f.stat().st_mtime_ns for f in files]
    assert fast["activities"] == exact["activities"] and fast["extent"] == exact["extent"]
    for ge, gf in zip(exact["groups"], fast["groups"], strict=True):
        for le, lf in zip(ge["lanes"], gf["lanes"], strict=True):
            assert le["id"] == lf["id"]
            be, bf = box_records(le["boxes"]), box_records(lf["boxes"])
            assert sum(b["count"] for b in be) == sum(b["count"] for b in bf)
            assert sum(b["busy_ns"] for b in be) == sum(b["busy_ns"] for b in bf)
    again = client.get(f"/runs/{run_id}/timeline.json?buckets=400").get_json()
    assert again == fast and [f.stat().st_mtime_ns for f in files] == stamps   # built once, not rebuilt


def test_lane_catalogue_is_kept_beside_the_report_and_read_from_there(client, db, settings, ingested) -> None:
    """The catalogue is read from the report once (a report ingested before the lanes file existed: the first
    view writes it), then from the file: a new web process does not scan the report's tables for it again."""
    import json

    run_id = seed.store_run(db, settings, ingested, [corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="lanes")
    paths = [pipeline.data_path(settings, r.trace_path)
             for r in db.scalars(sa.select(Report).where(Report.run_id == run_id).order_by(Report.id))]
    files = [run_overview.lanes_path(p) for p in paths]
    assert not any(f.exists() for f in files)
    first = client.get(f"/runs/{run_id}/timeline.json?buckets=300").get_json()
    assert all(f.is_file() and f.parent == p.parent for f, p in zip(files, paths, strict=True))
    stamps = [f.stat().st_mtime_ns for f in files]
    # A fresh process (its cache empty) reads the file: a thread name changed in the file shows in the label.
    described = json.loads(files[0].read_text())
    pid, tid = described["facts"]["nvtx"][0][:2]
    described["facts"]["threads"] = [[pid, tid, "renamed-in-the-lanes-file"]]
    files[0].write_text(json.dumps(described))
    web_timeline._cache.clear()
    second = client.get(f"/runs/{run_id}/timeline.json?buckets=300").get_json()
    labels = [lane["label"] for g in second["groups"] for lane in g["lanes"]]
    assert f"NVTX · tid {tid} (renamed-in-the-lanes-file)" in labels
    assert [f.stat().st_mtime_ns for f in files[1:]] == stamps[1:]   # not rewritten
    # Apart from that name, the catalogue from the file is the one read from the report.
    strip = lambda w: [[{k: v for k, v in lane.items() if k not in ("boxes", "label")} for lane in g["lanes"]]  # noqa: E731
                       for g in w["groups"]]
    assert strip(second) == strip(first) and second["extent"] == first["extent"]
