"""An analysis longer than GOODPUT_LEASE_SECONDS keeps its lease: a real worker, a 1 s lease
and reconcile every second, a run whose analysis takes several leases (exports built at test time)."""

from __future__ import annotations

import importlib.util
import time

import pytest

from tests.e2e.services import ROOT, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.timeout(420)]


def _builder():
    spec = importlib.util.spec_from_file_location("make_big_export", ROOT / "benchmarks" / "make_big_export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build


def test_an_analysis_longer_than_its_lease_is_not_requeued(make_service, tmp_path):
    build = _builder()
    # Three distinct ~700k-kernel exports (different sizes, so different bytes): analyzing them takes a few
    # seconds, several times the lease.
    paths = []
    for i in range(3):
        out = tmp_path / f"rank{i}.sqlite"
        build(build.__globals__["DEFAULT_BASE"], out, 700_000 + 1000 * i)
        paths.append(out)
    svc = make_service("sqlite", lease_seconds=1, reconcile_interval_seconds=1)
    svc.start_web()
    # Two pool processes: a re-queued analysis would be claimed at once by the idle one.
    svc.start_worker(concurrency=2)
    svc.start_beat()
    run_id = svc.upload(paths, job="long-analysis")["id"]
    leases: list[str] = []
    report_leases: dict[int, set[str]] = {}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        run = svc.get(f"/runs/{run_id}")
        if run["analysis_status"] == "analyzing" and run["analysis_lease_expires_at"]:
            leases.append(run["analysis_lease_expires_at"])
        for r in run["reports"]:  # each report's own analysis holds the report's lease
            if r["status"] == "analyzing" and r["lease_owner"] and r["lease_expires_at"]:
                report_leases.setdefault(r["id"], set()).add(r["lease_expires_at"])
        if run["status"] in ("ready", "failed"):
            break
        time.sleep(0.2)
    assert run["status"] == "ready", f"{run['error']}\n{svc.log_tail()}"
    # One claim of the run-level step and of each report's analysis, never handed over; the reports' leases
    # were visible and renewed while their analyses ran (several leases long; the run-level step is short).
    assert (run["analysis_status"], run["analysis_attempts"], run["error"]) == ("ready", 1, None)
    assert run["analysis_lease_owner"] is None and run["analysis_lease_expires_at"] is None
    assert max((len(v) for v in report_leases.values()), default=0) >= 2, report_leases
    assert all(r["status"] == "ready" and r["attempts"] == 1 and r["lease_owner"] is None for r in run["reports"])
    assert _analysis_attempts(svc, run_id) == [1, 1, 1]
    findings = svc.get(f"/runs/{run_id}/findings?page_size=200")
    assert findings["total"] > 0
    time.sleep(3)  # reconcile keeps running: a finished analysis stays finished
    assert wait_for(lambda: svc.get(f"/runs/{run_id}")["analysis_attempts"] == 1, 5, "the run to stay analyzed")
    assert _analysis_attempts(svc, run_id) == [1, 1, 1]


def _analysis_attempts(svc, run_id: int) -> list[int]:
    import sqlalchemy as sa

    from app.db import engine_for

    engine = engine_for(svc.settings)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text("SELECT analysis_attempts FROM reports WHERE run_id = :r ORDER BY id"),
                                     {"r": run_id}).scalars())
    finally:
        engine.dispose()
