"""The one lease helper through the life of each kind of job (ingest, a report's analysis, a run's analysis):
claimed once, renewed only by its holder, taken over when it expires, taken back by the same task's
redelivery, failed when the attempts are used up, and found by reconcile when expired."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from app.models import Report, Run, utcnow
from app.services.jobs.leases import INGEST, REPORT_ANALYSIS, RUN_ANALYSIS, Lease, Outcome
from tests.workers.conftest import make_run

MAX = 3
# Lease owners as workers write them: host:pid/<celery task id>.
A, B = "host-a:1/task-a", "host-b:2/task-b"
KINDS = {"ingest": INGEST, "report analysis": REPORT_ANALYSIS, "run analysis": RUN_ANALYSIS}


def _job(session, settings, kind: str) -> sa.ColumnElement[bool]:
    """A row waiting for ``kind``'s worker; returns the condition naming it."""
    run_id, [rid] = make_run(session, settings, [("a.sqlite", b"x")])
    if kind == "report analysis":  # published by its ingest, no lease yet
        session.execute(sa.update(Report).where(Report.id == rid).values(status="analyzing"))
    if kind == "run analysis":  # every report terminal, the run's analysis queued
        session.execute(sa.update(Report).where(Report.id == rid).values(status="ready"))
        session.execute(sa.update(Run).where(Run.id == run_id).values(analysis_status="queued"))
        session.commit()
        return Run.id == run_id
    session.commit()
    return Report.id == rid


def _state(session, lease: Lease, row):
    session.expire_all()
    return session.execute(sa.select(lease.owner, lease.attempts).where(row)).one()


def _claim(session, lease: Lease, row, owner: str, now=None) -> Outcome:
    held = {INGEST: {Report.status: "ingesting"}, REPORT_ANALYSIS: {},
            RUN_ANALYSIS: {Run.analysis_status: "analyzing"}}[lease]
    crash = {INGEST: {Report.status: "failed"}, REPORT_ANALYSIS: {Report.status: "failed"},
             RUN_ANALYSIS: {Run.analysis_status: "failed"}}[lease]
    out = lease.claim(session, row, owner, 30, MAX, take=held, crash=crash, now=now or utcnow())
    session.commit()
    return out


def _expire(session, lease: Lease, row) -> None:
    session.execute(sa.update(lease.table).where(row).values({lease.expires: utcnow() - timedelta(seconds=1)}))
    session.commit()


@pytest.mark.parametrize("kind", KINDS)
def test_the_life_of_a_lease(session, settings, kind):
    lease = KINDS[kind]
    row = _job(session, settings, kind)
    assert _claim(session, lease, row, A) is Outcome.WON
    assert tuple(_state(session, lease, row)) == (A, 1)
    assert _claim(session, lease, row, B) is Outcome.NONE  # held: nobody else takes it
    assert lease.renew(session, row, A, 30) and not lease.renew(session, row, B, 30)
    assert _claim(session, lease, row, "host-a:9/task-a") is Outcome.WON  # its own message delivered again
    assert tuple(_state(session, lease, row)) == ("host-a:9/task-a", 2)
    now = utcnow()
    assert session.scalar(sa.select(sa.func.count()).select_from(lease.table).where(row, lease.expired(now))) == 0
    _expire(session, lease, row)
    assert session.scalar(sa.select(sa.func.count()).select_from(lease.table).where(row, lease.expired(now))) == 1
    assert not lease.renew(session, row, B, 30)  # a renewal is only the holder's
    assert _claim(session, lease, row, B) is Outcome.WON  # the expired lease is taken over
    assert tuple(_state(session, lease, row)) == (B, 3)
    _expire(session, lease, row)
    # Attempts used up by workers that died: the next claim fails the job instead of running it again.
    assert _claim(session, lease, row, A) is Outcome.CRASHED
    assert tuple(_state(session, lease, row)) == (None, 3)
    assert _claim(session, lease, row, A) is Outcome.NONE  # failed is final


@pytest.mark.parametrize("kind", KINDS)
def test_a_claim_does_not_take_a_job_in_another_state(session, settings, kind):
    lease = KINDS[kind]
    row = _job(session, settings, kind)
    other = {INGEST: {Report.status: "ready"}, REPORT_ANALYSIS: {Report.status: "ready"},
             RUN_ANALYSIS: {Run.analysis_status: "ready"}}[lease]
    session.execute(sa.update(lease.table).where(row).values(other))
    session.commit()
    assert _claim(session, lease, row, A) is Outcome.NONE
    assert tuple(_state(session, lease, row)) == (None, 0)


def test_a_job_of_a_deleted_run_is_not_claimed_nor_sent_again(session, settings):
    """Issue #45 item 3: an ingest message delivered again after its run was deleted (before the purge removed
    the rows) claimed the report and ran again; reconcile also kept sending it."""
    from app.services.jobs import pipeline
    from app.services.jobs.report_analysis import claim_report_analysis

    run_id, [ingest, analysis] = make_run(session, settings, [("a.sqlite", b"x"), ("b.sqlite", b"y")])
    session.execute(sa.update(Report).where(Report.id == analysis).values(status="analyzing"))
    session.execute(sa.update(Report).where(Report.id == ingest).values(updated_at=utcnow() - timedelta(hours=1)))
    session.execute(sa.update(Run).where(Run.id == run_id).values(deleted_at=utcnow()))
    session.commit()
    assert not pipeline.claim_report(session, ingest, A, 30)
    assert not claim_report_analysis(session, analysis, A, 30)
    todo = pipeline.reconcile(session, lease_seconds=30)
    assert ingest not in todo.reports and analysis not in todo.analyses
    session.expire_all()
    assert [session.get(Report, r).attempts for r in (ingest, analysis)] == [0, 0]
