"""The route table of /api/v1: one row per operation, read by the blueprint and the OpenAPI generator."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.api import docs, views
from app.api.params import parse_query
from app.auth import require_scope

PAGE = ("page", "page_size")


@dataclass(frozen=True)
class Route:
    path: str                       # Flask rule under /api/v1
    method: str
    view: Callable[..., Any]
    scope: str | None               # None: public
    summary: str
    response: str                   # schema name of the success body
    status: int = 200
    params: tuple[str, ...] = ()    # query parameters (app.api.params.PARAMS)
    body: str | None = None         # request body: 'multipart' | 'binary' | 'json'
    errors: tuple[int, ...] = ()
    tag: str = "runs"

    @property
    def endpoint(self) -> str:
        return self.view.__name__

    def wrapped(self) -> Callable[..., Any]:
        """The view as mounted: its query parameters (``params``, the same list the document shows) parsed
        and passed as keyword arguments after the scope check, so a 401/403 comes before a 400."""
        inner, names = self.view, self.params
        view = inner
        if names:
            @functools.wraps(inner)
            def view(**path: Any) -> Any:
                return inner(**path, **parse_query(names))

        return require_scope(self.scope)(view) if self.scope else view


ROUTES: tuple[Route, ...] = (
    Route("/runs", "POST", views.create_run, "write", "Upload exports as a new run (multipart) or create an "
          "empty run (JSON metadata)", "RunDetail", 202, body="multipart", errors=(400, 413, 415, 422)),
    Route("/runs", "GET", views.list_runs, "read", "List runs", "RunList",
          params=("job", "tag", "status", "submitter", "created_after", "created_before", "sort", *PAGE),
          errors=(400,)),
    Route("/runs/<id:run_id>", "GET", views.get_run, "read", "A run with its reports", "RunDetail",
          errors=(404,)),
    Route("/runs/<id:run_id>", "DELETE", views.delete_run, "write", "Delete a run (its files are purged)",
          "Deleted", 202, errors=(404,)),
    Route("/runs/<id:run_id>/reports/<name>", "PUT", views.put_report, "write",
          "Stream one export into a run (202 new or a failed report tried again, 200 the same bytes already "
          "there)", "Report", 202,
          body="binary", errors=(404, 413, 422)),
    Route("/runs/<id:run_id>/retry", "POST", views.retry_run, "write",
          "Retry the reports that failed for a transient reason (no_space, timeout, worker_crashed), or the "
          "failed analysis", "RunDetail", 202, errors=(404, 409)),
    Route("/runs/<id:run_id>/analysis", "POST", views.reanalyze_run, "write",
          "Analyze the run again with another analysis window (JSON {window}: steady, all, startup, nvtx:NAME, "
          "iterations:A-B, time:T0-T1)", "RunDetail", 202, body="json", errors=(400, 404, 409, 422)),
    Route("/runs/<id:run_id>/findings", "GET", views.list_findings, "read",
          "The run's findings, largest impact first", "FindingList", params=("severity", "rule", "rank", *PAGE),
          errors=(400, 404)),
    Route("/runs/<id:run_id>/summary", "GET", views.run_summary, "read",
          "The run's time breakdown and headline numbers", "Summary", errors=(404,)),
    Route("/jobs", "GET", views.list_jobs, "read", "List jobs", "JobList", params=PAGE, errors=(400,), tag="jobs"),
    Route("/jobs/<path:name>/history", "GET", views.job_history, "read",
          "A job's per-run headline numbers over time", "JobHistory", params=("limit",), errors=(400, 404),
          tag="jobs"),
    Route("/compare", "GET", views.compare, "read", "Compare two runs (head - base)", "Compare",
          params=("base", "head", "noise_pct"), errors=(400, 404)),
    Route("/rules", "GET", views.list_rules, "read", "The rule catalogue with docs and thresholds", "RuleList",
          tag="rules"),
    Route("/health", "GET", views.health, None, "Reachability of the metadata DB and the broker", "Health",
          errors=(503,), tag="service"),
    Route("/openapi.json", "GET", docs.openapi, None, "This OpenAPI document", "OpenAPI", tag="service"),
    Route("/tokens", "GET", views.list_tokens, "read", "API tokens the caller may manage (an admin: all; "
          "a person: their own)", "TokenList", tag="tokens"),
    Route("/tokens/<id:token_id>", "DELETE", views.revoke_token, "write",
          "Revoke a token (its owner or an admin)", "Token", errors=(404,), tag="tokens"),
)
