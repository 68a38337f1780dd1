"""Typed errors raised by readers and the engine; the one boundary (CLI, task, view) maps them."""

from __future__ import annotations

from typing import TypedDict

# Every code a person may see, with what it means. The service maps these to HTTP statuses.
ERROR_CODES: dict[str, str] = {
    "empty_file": "the file is empty",
    "not_sqlite": "the file is not an SQLite database",
    "not_nsys_export": "an SQLite file without the tables of an Nsight Systems export",
    "not_ncu_csv": "not an Nsight Compute CSV export",
    "not_nccl_log": "not an NCCL debug log (NCCL_DEBUG=INFO output or nccl-tests output)",
    "ncu_rep_needs_ncu": "a binary .ncu-rep report, and no ncu binary to convert it",
    "nsys_rep_needs_nsys": "a binary .nsys-rep report, and no nsys binary to convert it",
    "unknown_format": "neither an nsys SQLite export nor an ncu CSV export",
    "corrupt": "the file failed SQLite's integrity check",
    "unsafe_schema": "a view or trigger stands where a table is expected",
    "unsupported_schema": "an export schema this version of Goodput cannot read",
    "too_large": "the file exceeds the configured size limit",
    "timeout": "reading the file took longer than the configured limit",
    "no_space": "not enough disk space to ingest the file",
    "worker_crashed": "the worker died while processing the file",
    "bad_window": "an analysis window the report cannot give (a bad spec, or a phase, range or iterations it lacks)",
    "internal": "an unexpected error inside Goodput",
}


# What an error's ``details`` name: a place in the input (a CSV's line and column), a table and its columns.
ErrorDetail = int | str | list[str] | None


class ErrorInfo(TypedDict):
    """A ``TraceError`` as JSON: the API's error body and a failed job's record."""

    code: str
    message: str
    details: dict[str, ErrorDetail]


class TraceError(Exception):
    """A problem with an input trace, with a stable machine code and a message a person can act on."""

    def __init__(self, code: str, message: str, details: dict[str, ErrorDetail] | None = None) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown trace error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> ErrorInfo:
        return {"code": self.code, "message": self.message, "details": self.details}
