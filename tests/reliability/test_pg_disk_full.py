"""A real PostgreSQL whose disk fills: a throwaway cluster on a small tmpfs (mounted by the test, as root), the
service's metadata writes (new runs, an upload's report rows) until the disk is full are the API's JSON 507
``NO_SPACE``, nothing is half-written, and the same request succeeds once space is freed.

The cluster's WAL lives off the tmpfs: PostgreSQL stops (PANIC) when it cannot write WAL, which is an operator's
outage, not a request's error; a full data directory is what a request meets."""

from __future__ import annotations

import glob
import io
import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from app import create_app
from app.db import upgrade
from app.services.accounts import tokens
from app.settings import Settings
from tests.conftest import corpus_file, redis_db
from tests.e2e.services import free_port

pytestmark = [pytest.mark.services, pytest.mark.timeout(300)]

REDIS_URL = "redis://127.0.0.1:6379"
TMPFS_MB = 48
# Left free on the tmpfs once the ballast is written: a few hundred requests' rows fill it.
MARGIN_BYTES = 1024 * 1024


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        pytest.fail("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return Path(found[-1]).parent


def _as_postgres(*cmd: str, timeout: float = 120) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture
def small_cluster(tmp_path):
    """(database URL, tmpfs mount point) of a fresh cluster whose data directory is a TMPFS_MB tmpfs."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the suite as root)")
    base = Path(f"/tmp/goodput-pgfull-{os.getpid()}-{free_port()}")
    mount, wal, sock = base / "data", base / "wal", base / "sock"
    for d in (mount, wal, sock):
        d.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m,mode=0700", "tmpfs", str(mount)], check=True,
                   timeout=30)
    pg, port, log = _pg_bin(), free_port(), base / "postgres.log"
    started = False
    try:
        shutil.chown(base, "postgres")
        for d in (mount, wal, sock):
            shutil.chown(d, "postgres")
        pgdata = mount / "pgdata"
        _as_postgres(str(pg / "initdb"), "-D", str(pgdata), "--waldir", str(wal / "pg_wal"), "-U", "postgres",
                     "-A", "trust", "--no-sync", "--no-instructions")
        log.touch()
        shutil.chown(log, "postgres")
        opts = (f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "
                "-c shared_buffers=16MB -c autovacuum=off -c max_connections=40")
        _as_postgres(str(pg / "pg_ctl"), "-D", str(pgdata), "-l", str(log), "-o", opts, "-w", "-t", "60", "start")
        started = True
        admin = sa.create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres",
                                 isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("CREATE DATABASE goodput"))
        admin.dispose()
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/goodput"
        upgrade(url)
        yield url, mount
    finally:
        if started:
            _as_postgres(str(pg / "pg_ctl"), "-D", str(mount / "pgdata"), "-m", "immediate", "-w", "-t", "60", "stop")
        subprocess.run(["umount", str(mount)], check=True, timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def _count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()  # noqa: S608 - constants


def test_metadata_writes_on_a_full_postgresql_disk_are_507_and_retry_works(small_cluster, tmp_path):
    url, mount = small_cluster
    broker = redis.Redis.from_url(f"{REDIS_URL}/{redis_db()}")
    broker.delete("ingest", "light")
    settings = replace(Settings(), data_dir=tmp_path / "data", database_url=url,
                       broker_url=f"{REDIS_URL}/{redis_db()}", secret_key="test-secret")
    app = create_app(settings)
    app.config["TESTING"] = True
    engine = app.extensions["goodput.engine"]
    try:
        with app.extensions["goodput.sessionmaker"]() as session:
            write = {"Authorization": f"Bearer {tokens.create_token(session, 't-write', 'write').token}"}
        client = app.test_client()
        # Fill the tmpfs but MARGIN_BYTES with a ballast file: what is freed later.
        ballast = mount / "ballast"
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        with ballast.open("wb") as fh:
            os.posix_fallocate(fh.fileno(), 0, free - MARGIN_BYTES)
        accepted = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # Incompressible tags: every run adds its own pages.
            tags = [f"k{j}={os.urandom(200).hex()}" for j in range(40)]
            r = client.post("/api/v1/runs", headers=write, json={"job": f"job-{accepted}", "tags": tags})
            if r.status_code != 202:
                break
            accepted += 1
        assert r.status_code == 507, (accepted, r.status_code, r.get_data()[:300])
        assert r.json["error"]["code"] == "NO_SPACE" and r.headers["Content-Type"].startswith("application/json")
        assert accepted > 0  # the margin took some runs before it filled
        # Nothing half-written: exactly the accepted runs and their jobs (not the refused one's), each run with
        # all of its tags.
        assert _count(engine, "runs") == _count(engine, "jobs") == accepted
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM jobs WHERE name = :j"),
                                {"j": f"job-{accepted}"}).scalar_one() == 0
            tags = [t for (t,) in conn.execute(sa.text("SELECT tags FROM runs"))]
        assert all(len(t) == 40 for t in tags), [len(t) for t in tags]
        tags = [f"k{j}={os.urandom(200).hex()}" for j in range(40)]
        # An upload's rows on the full disk: 507 too, and its staged file is not kept.
        vecadd = corpus_file("vecadd-2026.sqlite")
        up = client.post("/api/v1/runs", headers=write,
                         data={"job": "upload", "files": [(io.BytesIO(vecadd.read_bytes()), vecadd.name)]})
        assert up.status_code == 507 and up.json["error"]["code"] == "NO_SPACE", up.get_data()[:300]
        assert _count(engine, "runs") == accepted and _count(engine, "reports") == 0
        staging = settings.data_dir / "staging"
        assert not staging.exists() or not any(staging.iterdir())
        # Issue #45 item 6: nor the stored upload (it waited for the hourly sweep), for a report PUT either.
        uploads = settings.data_dir / "uploads"
        assert not uploads.exists() or not any(p.is_file() for p in uploads.rglob("*"))
        with engine.connect() as conn:
            run_id = conn.execute(sa.text("SELECT min(id) FROM runs")).scalar_one()  # an accepted run
        put = client.put(f"/api/v1/runs/{run_id}/reports/{vecadd.name}", headers=write, data=vecadd.read_bytes())
        assert put.status_code == 507 and put.json["error"]["code"] == "NO_SPACE", put.get_data()[:300]
        assert not uploads.exists() or not any(p.is_file() for p in uploads.rglob("*"))
        assert _count(engine, "reports") == 0
        assert broker.llen("ingest") == 0
        assert client.get("/api/v1/health").status_code == 200

        ballast.unlink()  # space freed: the same requests now succeed
        r = client.post("/api/v1/runs", headers=write, json={"job": f"job-{accepted}", "tags": tags})
        assert r.status_code == 202, r.get_data()[:300]
        up = client.post("/api/v1/runs", headers=write,
                         data={"job": "upload", "files": [(io.BytesIO(vecadd.read_bytes()), vecadd.name)]})
        assert up.status_code == 202, up.get_data()[:300]
        assert _count(engine, "runs") == accepted + 2 and _count(engine, "reports") == 1
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM jobs WHERE name = :j"),
                                {"j": f"job-{accepted}"}).scalar_one() == 1
        assert broker.llen("ingest") == 1
    finally:
        app.extensions["goodput.token_usage"].close()
        engine.dispose()
        broker.delete("ingest", "light")
        broker.close()
