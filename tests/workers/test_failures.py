"""One mapping from what a task raised to its job's (code, message), and the API's error table knowing every
code a trace error can carry."""

from __future__ import annotations

import errno

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from analysis.errors import ERROR_CODES, TraceError
from app.errors import ERROR_STATUS, ApiError
from workers.failures import UNEXPECTED, Step, analysis_failure, classify

INGEST = Step("ingest", 600, "GOODPUT_INGEST_TIMEOUT_SECONDS")
ANALYSIS = Step("the report's analysis", 900)


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_a_trace_error_keeps_its_own_code(code):
    assert classify(TraceError(code, "why"), INGEST) == (code, "why")


def test_time_limits_are_timeouts_naming_the_limit_and_its_setting():
    assert classify(SoftTimeLimitExceeded(), INGEST) == (
        "timeout", "ingest took longer than 600 s (GOODPUT_INGEST_TIMEOUT_SECONDS)")
    assert classify(SoftTimeLimitExceeded(), Step("analysis", 2.5)) == ("timeout", "analysis took longer than 2.5 s")


def test_file_system_errors_are_no_space_or_internal():
    assert classify(OSError(errno.ENOSPC, "No space left on device"), INGEST) == (
        "no_space", "the data directory ran out of disk space during ingest")
    code, message = classify(PermissionError(errno.EACCES, "Permission denied"), INGEST)
    assert code == "internal" and "Permission denied" in message and "worker log" in message


def test_anything_else_is_internal_without_its_text():
    assert classify(ZeroDivisionError("secret detail"), INGEST) == ("internal", UNEXPECTED)


def test_an_analysis_failure_keeps_timeouts_and_names_the_trace_code():
    assert analysis_failure(SoftTimeLimitExceeded(), ANALYSIS) == (
        "timeout", "the report's analysis took longer than 900 s")
    assert analysis_failure(TraceError("bad_window", "no NVTX range named x"), ANALYSIS) == (
        "analysis_failed", "bad_window: no NVTX range named x")
    assert analysis_failure(KeyError("x"), ANALYSIS) == ("analysis_failed", UNEXPECTED)


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_every_trace_code_has_its_own_api_code(code):
    err = ApiError.from_trace_error(TraceError(code, "why"))
    assert err.code == code.upper() and err.status == ERROR_STATUS[code.upper()]


def test_timeout_bad_window_and_crashes_are_not_format_errors():
    statuses = {c: ApiError.from_trace_error(TraceError(c, "m")).status for c in ("timeout", "bad_window",
                                                                                     "worker_crashed")}
    assert statuses == {"timeout": 504, "bad_window": 422, "worker_crashed": 500}
