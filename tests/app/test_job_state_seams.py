"""Job state has one way in: leases are freed by the lease helper only (``app.services.jobs.leases``: ``Lease.release``,
``finish``, ``clear``), statuses are written and compared as their enums, and each kind of job has one crash
message (``Lease.crash_message``)."""

from __future__ import annotations

import re
from pathlib import Path

from app.services.jobs.leases import INGEST, REPORT_ANALYSIS, RUN_ANALYSIS

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("app", "workers") for p in (ROOT / d).rglob("*.py")]
HELPER = ROOT / "app" / "services" / "jobs" / "leases.py"
STATUS = "queued|ingesting|analyzing|ready|failed|processing|deleted"
# A status column or attribute compared with, set to or filtered by a quoted status value.
LITERAL = re.compile(r"\b(?:status|analysis_status)\b[\"']?\s*(?:==|!=|=|:|\.in_\(\(|in \()\s*[\"'](?:" + STATUS + r")[\"']")
# A lease owner or expiry set to None by hand (keyword, attribute, or a chained assignment).
RELEASE = re.compile(r"\b(?:analysis_)?lease_(?:owner|expires_at)\b\s*=\s*(?:None|[\w.]+\s*=\s*None)")


def _hits(pattern: re.Pattern[str], skip: Path | None = None) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in SOURCES if p != skip
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if not line.lstrip().startswith("#") and pattern.search(line)]


def test_no_status_literal_beside_the_enums():
    assert _hits(LITERAL) == []


def test_no_lease_is_freed_by_hand():
    assert _hits(RELEASE, skip=HELPER) == []


def test_the_guards_find_what_they_forbid():
    assert LITERAL.search('Report.status == "ready"') and LITERAL.search('.values(status="failed")')
    assert LITERAL.search('Report.status.in_(("ready", "failed"))') and LITERAL.search('{"analysis_status": "queued"}')
    assert RELEASE.search("lease_owner=None,") and RELEASE.search("run.analysis_lease_owner = run.x = None")
    assert not LITERAL.search("Report.status == ReportStatus.READY")


def test_each_kind_of_job_has_one_crash_message():
    messages = {lease.crash_message(3) for lease in (INGEST, REPORT_ANALYSIS, RUN_ANALYSIS)}
    assert len(messages) == 3 and all("3 times" in m for m in messages)
    assert sum(p.read_text().count("def crash_message") + p.read_text().count("def _crash_message")
               for p in SOURCES) == 1
