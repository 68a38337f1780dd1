"""API read latency: `GET /api/v1/runs` and `GET /api/v1/runs/{id}/findings` with 1,000 runs and 50,000
findings in PostgreSQL, 20 concurrent clients, against gunicorn.

    .venv/bin/python benchmarks/api_latency.py [--requests 3000] [--clients 20] [--workers 2]

The server is the command line `goodput serve` runs (benchmarks/_server.py): gunicorn sync workers, 2 by
default as in `make run`.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import statistics
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._server import gunicorn  # noqa: E402
from goodput_cli.service import WEB_WORKERS  # noqa: E402

PG_ADMIN_URL = os.environ.get("GOODPUT_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
RULES = ["GPU001", "GPU002", "MEM001", "MEM002", "SYNC001", "COMM001", "COMM002", "NCU001", "NCU002", "KRN001"]


def seed(url: str, runs: int, findings_per_run: int) -> None:
    """Jobs, runs (ready), one report and one summary per run, and findings with realistic evidence."""
    from app.models import Finding, Job, Report, Run, RunSummary

    rng = random.Random(7)
    engine = sa.create_engine(url)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(sa.insert(Job), [{"name": f"job-{j:02d}", "created_at": t0} for j in range(20)])
        job_ids = [r[0] for r in conn.execute(sa.select(Job.id).order_by(Job.id))]
        conn.execute(sa.insert(Run), [{
            "job_id": job_ids[i % 20], "tags": {"team": f"t{i % 5}", "nodes": str(1 + i % 4)},
            "git_sha": uuid.uuid4().hex[:12], "cluster": "eos", "submitter": f"ci-{i % 3}", "source": "api",
            "status": "ready", "analysis_status": "ready", "analyzed_at": t0 + timedelta(hours=i),
            "analysis_attempts": 1, "rule_statuses": [{"id": r, "status": "ok", "findings": 5} for r in RULES],
            "created_at": t0 + timedelta(hours=i), "updated_at": t0 + timedelta(hours=i)} for i in range(runs)])
        run_ids = [r[0] for r in conn.execute(sa.select(Run.id).order_by(Run.id))]
        conn.execute(sa.insert(Report), [{
            "run_id": rid, "name": f"rank0-{rid}.sqlite", "kind": "nsys", "rank": 0, "host": "node1",
            "sha256": uuid.uuid4().hex * 2, "size_bytes": 10**9, "status": "ready", "attempts": 1,
            "progress": {"stage": "done", "done": 1, "total": 1}, "counts": {"kernels": 10**6},
            "info": {}, "upload_path": "uploads/x", "created_at": t0, "updated_at": t0} for rid in run_ids])
        conn.execute(sa.insert(RunSummary), [{
            "run_id": rid, "report_id": None, "data": {"reports": ["rank0"]}, "span_ns": 10**10,
            "compute_ns": 6 * 10**9, "comm_exposed_ns": 10**9, "memory_only_ns": 10**9, "idle_ns": 2 * 10**9,
            "goodput_pct": 60.0, "finding_count": findings_per_run, "top_impact_ns": 10**9,
            "created_at": t0} for rid in run_ids])
        batch = []
        for rid in run_ids:
            for k in range(findings_per_run):
                impact = rng.randrange(10**5, 10**9)
                batch.append({
                    "run_id": rid, "report_id": None, "position": k, "rule_id": RULES[k % len(RULES)],
                    "severity": ("critical", "warning", "info")[k % 3], "title": f"Finding {k} <with> & markup",
                    "message": "GPU idle in gaps " * 10, "impact_ns": impact, "impact_pct": impact / 10**8,
                    "advice": "Prefetch data and queue work ahead. " * 4, "evidence_total": 40, "report": "rank0",
                    "rank": 0, "extra": {}, "created_at": t0,
                    "evidence": [{"start_ns": 10**6 * e, "end_ns": 10**6 * e + 5000, "device": 0, "stream": 7,
                                  "name": "void gemm<float, 128>(...)", "value_ns": 5000} for e in range(10)],
                })
            if len(batch) >= 5000:
                conn.execute(sa.insert(Finding), batch)
                batch = []
        if batch:
            conn.execute(sa.insert(Finding), batch)
    engine.dispose()


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def load(url: str, token: str, run_ids: list[int], clients: int, total: int) -> dict[str, list[float]]:
    """``clients`` threads share ``total`` requests, alternating the two endpoints; latencies in ms."""
    lat: dict[str, list[float]] = {"runs": [], "findings": []}
    lock = threading.Lock()
    counter = iter(range(total))
    errors: list[str] = []

    host, port = url.removeprefix("http://").split(":")

    def worker(seed: int) -> None:
        # http.client (requests' own overhead would be measured as server latency: the clients share the
        # 2 CPUs with the server). gunicorn's sync workers close the connection after each response;
        # http.client then opens a new one for the next request, inside the timed part.
        rng = random.Random(seed)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {"Authorization": f"Bearer {token}"}
        for i in counter:
            if i % 2 == 0:
                kind = "runs"
                q = rng.choice(["", "job=job-03", "tag=team=t1", "status=ready&sort=created_at", "submitter=ci-1"])
                path = f"/api/v1/runs?page={rng.randint(1, 4)}&page_size=50&{q}"
            else:
                kind = "findings"
                path = f"/api/v1/runs/{rng.choice(run_ids)}/findings?page_size=50"
            t = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
            except (http.client.HTTPException, OSError):  # server closed a kept-alive connection
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
            ms = (time.perf_counter() - t) * 1000
            if resp.status != 200 or b'"total":0' in body:
                errors.append(f"{path}: {resp.status}")
            with lock:
                lat[kind].append(ms)
        conn.close()

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, e.g. {errors[:3]}")
    return lat


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--findings", type=int, default=50_000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=WEB_WORKERS, help="gunicorn workers (default: goodput serve's)")
    args = ap.parse_args()
    name = f"goodput_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(False)
    data_dir = Path(os.environ.get("TMPDIR", "/tmp")) / name
    try:
        from app.db import make_engine, make_sessionmaker, upgrade
        from app.services.accounts.tokens import create_token

        upgrade(url)
        t = time.perf_counter()
        seed(url, args.runs, args.findings // args.runs)
        print(f"seeded {args.runs} runs, {args.findings} findings in {time.perf_counter() - t:.1f} s")
        engine = make_engine(url)
        with make_sessionmaker(engine)() as session:
            token = create_token(session, "bench", "read").token
            run_ids = list(session.scalars(sa.text("SELECT id FROM runs")))
            counts = session.execute(sa.text("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM findings)")).one()
        engine.dispose()
        env = {"GOODPUT_DATABASE_URL": url, "GOODPUT_DATA_DIR": str(data_dir), "GOODPUT_SECRET_KEY": "bench",
               "GOODPUT_BROKER_URL": "redis://127.0.0.1:6379/14"}
        with gunicorn(env, workers=args.workers) as server:
            load(server.url, token, run_ids, args.clients, 200)  # warm-up: connections, caches
            cpu0, t = server.cpu_seconds(), time.perf_counter()
            lat = load(server.url, token, run_ids, args.clients, args.requests)
            wall, cpu = time.perf_counter() - t, server.cpu_seconds() - cpu0
        print(f"PostgreSQL: {counts[0]} runs, {counts[1]} findings; gunicorn {args.workers} sync workers; "
              f"{args.clients} concurrent clients; {args.requests} requests in {wall:.1f} s "
              f"({args.requests / wall:.0f} req/s); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"gunicorn CPU per request: {1000 * cpu / args.requests:.2f} ms "
              f"(so one dedicated core serves ~{args.requests / cpu:.0f} req/s)")
        for kind, values in lat.items():
            print(f"GET {'/api/v1/runs' if kind == 'runs' else '/api/v1/runs/{id}/findings':32} n={len(values):5d}  "
                  f"p50 {statistics.median(values):6.1f} ms  p95 {percentile(values, 95):6.1f} ms  "
                  f"p99 {percentile(values, 99):6.1f} ms")
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
