"""A full disk under the metadata DB is the documented 507 ``NO_SPACE``, as a full upload disk is, not a 500;
nothing half-written stays."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from app.errors import is_disk_full


@pytest.fixture(params=["sqlite"])
def backend(request) -> str:
    """SQLite's page limit stands in for a full disk; PostgreSQL's disk_full is classified below."""
    return request.param


def test_sqlite_metadata_writes_on_a_full_disk_are_507(app, client, auth):
    engine = app.extensions["goodput.engine"]
    assert client.post("/api/v1/runs", headers=auth["write"], json={"job": "before"}).status_code == 202

    @sa.event.listens_for(engine, "connect")
    def _full(dbapi_con, _record):
        pages = dbapi_con.execute("PRAGMA page_count").fetchone()[0]
        dbapi_con.execute(f"PRAGMA max_page_count={pages}")  # SQLITE_FULL on the next page it needs

    engine.dispose()
    try:
        # Pages freed by earlier tests' rows are reused first: write until the file must grow (bounded).
        for i in range(300):
            tags = [f"k{j}={'v' * 400}" for j in range(40)]
            r = client.post("/api/v1/runs", headers=auth["write"], json={"job": f"job-{i}", "tags": tags})
            if r.status_code != 202:
                break
        assert r.status_code == 507 and r.json["error"]["code"] == "NO_SPACE", (r.status_code, r.get_data()[:300])
    finally:
        sa.event.remove(engine, "connect", _full)
        engine.dispose()
    assert client.get("/api/v1/health").status_code == 200
    # Issue #45 item 6: the refused upload left nothing, not even its new job (a SAVEPOINT's RELEASE had
    # committed it under pysqlite).
    with engine.connect() as con:
        assert con.execute(sa.text("SELECT count(*) FROM jobs WHERE name = :n"), {"n": f"job-{i}"}).scalar() == 0
        assert con.execute(sa.text("SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id "
                                   "WHERE j.name = :n"), {"n": f"job-{i}"}).scalar() == 0


def test_postgresql_disk_full_is_classified_as_no_space():
    full = sa.exc.OperationalError("INSERT", {}, psycopg.errors.DiskFull("could not extend file"))
    other = sa.exc.OperationalError("INSERT", {}, psycopg.errors.UndefinedTable("nope"))
    assert is_disk_full(full) and not is_disk_full(other)
