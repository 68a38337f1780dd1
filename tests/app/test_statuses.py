"""Run, analysis and report statuses are str enums in code and the same plain text in the DB and the API."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import StatementError

from app.models import RUN_STATUSES, AnalysisStatus, Report, ReportStatus, Run, RunStatus
from app.services.jobs import runs


def test_the_enums_keep_the_published_values():
    # The API's schema and the DB's rows were written with these strings; renaming one is a migration.
    assert [s.value for s in RunStatus] == ["queued", "processing", "ready", "failed", "deleted"]
    assert [s.value for s in AnalysisStatus] == ["queued", "analyzing", "ready", "failed"]
    assert [s.value for s in ReportStatus] == ["queued", "ingesting", "analyzing", "ready", "failed"]
    assert RUN_STATUSES == tuple(RunStatus)


def test_statuses_read_back_as_enums_and_are_stored_as_text(client, auth, session):
    run_id = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j"}).json["id"]
    run = session.get(Run, run_id)
    assert run.status is RunStatus.QUEUED
    raw = session.execute(sa.text("SELECT status FROM runs WHERE id = :id"), {"id": run_id}).scalar_one()
    assert type(raw) is str and raw == "queued"
    # A plain string still binds (SQL written with literals) and reads back as the member.
    session.execute(sa.update(Run).where(Run.id == run_id).values(status="failed"))
    session.commit()
    session.expire_all()
    assert session.get(Run, run_id).status is RunStatus.FAILED
    body = client.get(f"/api/v1/runs/{run_id}", headers=auth["read"]).json
    assert body["status"] == "failed"
    assert client.get("/api/v1/runs?status=failed", headers=auth["read"]).json["total"] == 1


def test_a_status_outside_the_enum_is_refused_before_it_reaches_the_row(client, auth, session):
    run_id = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j"}).json["id"]
    with pytest.raises(StatementError):
        session.execute(sa.update(Report).where(Report.run_id == run_id).values(status="half-done"))
    session.rollback()
    with pytest.raises(StatementError):
        session.execute(sa.update(Run).where(Run.id == run_id).values(status="half-done"))
    session.rollback()
    assert session.get(Run, run_id).status is RunStatus.QUEUED


@pytest.mark.parametrize("analysis, reports, expected", [
    (None, [], RunStatus.QUEUED),
    (None, ["queued", "queued"], RunStatus.QUEUED),
    ("queued", ["ready", "ingesting"], RunStatus.PROCESSING),
    ("analyzing", ["ready"], RunStatus.PROCESSING),
    ("ready", ["ready", "failed"], RunStatus.READY),
    (None, ["failed", "failed"], RunStatus.FAILED),
    ("failed", ["ready"], RunStatus.FAILED),
])
def test_derive_status_from_plain_strings_or_members(analysis, reports, expected):
    class Row:  # the shape the pipeline passes: a row of (deleted_at, analysis_status)
        deleted_at = None
        analysis_status = analysis

    assert runs.derive_status(Row, reports) is expected
    assert runs.derive_status(Row, [ReportStatus(s) for s in reports]) is expected
