"""The stored per-report analysis summaries (``RunSummary.data``) read as typed objects, so the pages read
``analysis.api.ReportSummary`` parts (phases, system metrics, top kernels ...) rather than JSON keys."""

from __future__ import annotations

from typing import Any

from analysis.api import ReportSummary


def report_summary(data: Any) -> ReportSummary | None:
    """One report's stored summary as its typed form; None when the row holds none (no analysis yet, or the
    run-level row). A part stored by an older version that no longer reads as its type stays JSON in
    ``details`` (its attribute is None): the page then leaves that part out, as it would a missing key."""
    if not isinstance(data, dict) or not isinstance(data.get("file"), str) or not isinstance(data.get("tool"), str):
        return None
    return ReportSummary.from_json(data, lenient=True)
