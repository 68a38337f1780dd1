"""An analysis longer than GOODPUT_LEASE_SECONDS keeps its lease (issue #18, bug 1): a real worker, a 1 s lease
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
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        run = svc.get(f"/runs/{run_id}")
        if run["analysis_status"] == "analyzing" and run["analysis_lease_expires_at"]:
            leases.append(run["analysis_lease_expires_at"])
        if run["status"] in ("ready", "failed"):
            break
        time.sleep(0.2)
    assert run["status"] == "ready", f"{run['error']}\n{svc.log_tail()}"
    # One claim, never handed over; the lease was visible and renewed while the analysis ran.
    assert (run["analysis_status"], run["analysis_attempts"], run["error"]) == ("ready", 1, None)
    assert run["analysis_lease_owner"] is None and run["analysis_lease_expires_at"] is None
    assert len(set(leases)) >= 2, leases
    assert all(r["status"] == "ready" and r["attempts"] == 1 for r in run["reports"])
    findings = svc.get(f"/runs/{run_id}/findings?page_size=200")
    assert findings["total"] > 0
    time.sleep(3)  # reconcile keeps running: a finished analysis stays finished
    assert wait_for(lambda: svc.get(f"/runs/{run_id}")["analysis_attempts"] == 1, 5, "the run to stay analyzed")
