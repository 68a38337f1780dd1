"""The one mapping from what a task raised to the (code, message) its job is failed with.

Codes are those of ``analysis.errors.ERROR_CODES``, so a report's ``error_code`` reads the same whichever
task failed it and the API's error table knows every one of them.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from celery.exceptions import SoftTimeLimitExceeded

from analysis.errors import TraceError

UNEXPECTED = "an unexpected error inside Goodput; the worker log has the details"


@dataclass(frozen=True)
class Step:
    """What the task was doing, for the messages: ``what`` starts a sentence ("ingest", "the report's
    analysis"); ``limit_s`` is its time limit, ``setting`` the variable that sets it (if any)."""

    what: str
    limit_s: float
    setting: str | None = None


def classify(exc: BaseException, step: Step) -> tuple[str, str]:
    """(code, message) for an exception that ended ``step``: the trace's own code for a TraceError,
    ``timeout`` past the soft time limit, ``no_space`` for a full disk, ``internal`` for anything else (its
    details stay in the worker log; the message says so)."""
    if isinstance(exc, TraceError):
        return exc.code, exc.message
    if isinstance(exc, SoftTimeLimitExceeded):
        seconds = int(step.limit_s) if float(step.limit_s).is_integer() else step.limit_s
        limit = f"{seconds} s" + (f" ({step.setting})" if step.setting else "")
        return "timeout", f"{step.what} took longer than {limit}"
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return "no_space", f"the data directory ran out of disk space during {step.what}"
        return "internal", (f"a file system error inside Goodput ({exc.strerror or type(exc).__name__}); "
                            "the worker log has the details")
    return "internal", UNEXPECTED


def analysis_failure(exc: BaseException, step: Step) -> tuple[str, str]:
    """(code, message) for a failed analysis: ``timeout`` keeps its code (a retry may pass); anything else
    is ``analysis_failed`` (what the run-level step sends back for another window), the message naming the
    trace's own code."""
    code, message = classify(exc, step)
    if code == "timeout":
        return code, message
    return "analysis_failed", f"{code}: {message}" if isinstance(exc, TraceError) else message
