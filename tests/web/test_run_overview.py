"""The run timeline's overview files (issue #12) through the web routes: built on first use beside each report's
DuckDB file, then used for the whole-run window with the same activities as the exact window."""

from __future__ import annotations

import sqlalchemy as sa

from analysis import run_overview
from analysis.timeline import box_records
from app.models import Report
from app.services import pipeline, web_timeline
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
