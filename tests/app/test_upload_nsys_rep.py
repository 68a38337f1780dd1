"""A binary .nsys-rep goes through the web process without an nsys binary there: it is stored as it came and
the worker that ingests it converts it (or, without nsys of its own, fails the report with that reason)."""

from __future__ import annotations

import io
import os
import stat

import pytest
import sqlalchemy as sa

from app.models import Report
from app.queue import INGEST_TASK
from tests.app.conftest import queued
from tests.conftest import corpus_file
from workers.celery_app import make_celery

EXPORT = corpus_file("vecadd-2026.sqlite")
# Not SQLite and not CSV: what a binary report looks like to the sniffer.
REP_BYTES = b"\x89NSYS-REP\x00binary report\x00" * 64


@pytest.fixture
def no_nsys(monkeypatch, tmp_path):
    """A PATH with no nsys on it (whatever the machine has installed)."""
    empty = tmp_path / "bin-empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


def _upload(client, auth) -> int:
    r = client.post("/api/v1/runs", headers=auth["write"], content_type="multipart/form-data",
                    data={"job": "rep", "files": [(io.BytesIO(REP_BYTES), "profile.nsys-rep")]})
    assert r.status_code == 202, r.json
    return r.json["reports"][0]["id"]


def test_the_web_process_accepts_an_nsys_rep_without_nsys(client, auth, session, settings, broker, no_nsys):
    rid = _upload(client, auth)
    report = session.get(Report, rid)
    assert (report.kind, report.status) == ("nsys", "queued")
    assert report.upload_path.endswith(".nsys-rep")  # the suffix tells the worker to convert it
    assert (settings.data_dir / report.upload_path).read_bytes() == REP_BYTES
    assert queued(broker) == [{"task": INGEST_TASK, "args": [rid]}]


def test_the_worker_converts_it_with_its_nsys(client, auth, session, settings, broker, no_nsys):
    rid = _upload(client, auth)
    fake = no_nsys / "nsys"  # `nsys export ... --output DST SRC`: writes a real export to DST
    fake.write_text(f'#!/bin/sh\nexec cp "{EXPORT}" "$7"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    os.environ["PATH"] = f"{no_nsys}{os.pathsep}/usr/bin{os.pathsep}/bin"  # cp itself
    assert make_celery(settings).tasks[INGEST_TASK](rid) == "ready"
    session.expire_all()
    report = session.get(Report, rid)
    assert report.status == "analyzing" and report.trace_path and report.counts


def test_a_worker_without_nsys_fails_the_report_with_that_reason(client, auth, session, settings, broker,
                                                                 no_nsys):
    rid = _upload(client, auth)
    assert make_celery(settings).tasks[INGEST_TASK](rid) == "nsys_rep_needs_nsys"
    session.expire_all()
    row = session.execute(sa.select(Report.status, Report.error_code, Report.error_message)
                          .where(Report.id == rid)).one()
    assert row[:2] == ("failed", "nsys_rep_needs_nsys") and "nsys export --type sqlite" in row[2]
