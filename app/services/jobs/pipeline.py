"""What the workers call to move a job along, in one place: job state (``jobstate``: claims, leases,
heartbeats, progress, failures, reconcile), result persistence (``results``), purging deleted runs
(``purge``) and where a report's files live (``storage``). This module only re-exports them."""

from __future__ import annotations

from app.services.jobs.jobstate import (
    TERMINAL,
    AnalysisInputs,
    Claim,
    Requeue,
    claim_report,
    claim_run_analysis,
    fail_report,
    fail_run_analysis,
    finish_ingest,
    reconcile,
    renew_report_lease,
    renew_run_lease,
    set_progress,
)
from app.services.jobs.purge import collect_garbage, delete_run_rows, remove_report_files
from app.services.jobs.results import FINDING_KEYS, SUMMARY_NS, finish_run_analysis
from app.services.storage import data_path, trace_path_for

__all__ = [
    "FINDING_KEYS", "SUMMARY_NS", "TERMINAL", "AnalysisInputs", "Claim", "Requeue", "claim_report",
    "claim_run_analysis", "collect_garbage", "data_path", "delete_run_rows", "fail_report", "fail_run_analysis",
    "finish_ingest", "finish_run_analysis", "reconcile", "remove_report_files", "renew_report_lease",
    "renew_run_lease", "set_progress", "trace_path_for",
]
