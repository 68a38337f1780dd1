"""Concurrent writers: uploads from many threads never fail with 'database is locked' on SQLite."""

from __future__ import annotations

import io
import threading

import sqlalchemy as sa

from app.models import Job, Report, Run
from tests.conftest import corpus_file

NCU = corpus_file("pytorch-sgemm-small.csv")


def test_concurrent_uploads_and_reads(app, auth, session):
    content = NCU.read_bytes()
    errors: list[str] = []

    def uploader(i: int) -> None:
        client = app.test_client()
        for k in range(6):
            # Same job from every thread (a get-or-create race), distinct bytes per upload.
            body = content + f"\n# {i}-{k}\n".encode()
            r = client.post("/api/v1/runs", headers=auth["write"],
                            data={"job": "shared", "files": [(io.BytesIO(body), f"{i}-{k}.csv")]})
            if r.status_code != 202:
                errors.append(f"POST {r.status_code} {r.get_data(as_text=True)[:200]}")
            if client.get("/api/v1/runs?job=shared", headers=auth["read"]).status_code != 200:
                errors.append("GET failed")

    threads = [threading.Thread(target=uploader, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert session.scalar(sa.select(sa.func.count()).select_from(Job)) == 1
    assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 36
    assert session.scalar(sa.select(sa.func.count()).select_from(Report)) == 36
