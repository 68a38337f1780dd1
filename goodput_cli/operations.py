"""Operator subcommands on stored runs: `retry RUN` (transient failures), `reanalyze RUN --window SPEC` (another
analysis window) and `reingest` (every report again)."""

from __future__ import annotations

import argparse
import sys

from analysis import fmt
from goodput_cli.admin import _session
from goodput_cli.errors import UsageError


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the operator subcommands."""
    p = sub.add_parser("retry", help="retry a run's reports that failed for a transient reason "
                                     "(no_space, timeout, worker_crashed), or its failed analysis")
    p.add_argument("run", type=int, help="run id")
    p.set_defaults(func=cmd_retry)

    p = sub.add_parser("reanalyze", help="analyze a run again with another analysis window, checked against its "
                                         "stored reports first (a window they do not have: one line, exit 2)")
    p.add_argument("run", type=int, help="run id")
    p.add_argument("--window", required=True, metavar="SPEC",
                   help="steady, all, startup, nvtx:NAME, iterations:A-B, loop:N or time:T0-T1")
    p.set_defaults(func=cmd_reanalyze)

    p = sub.add_parser("reingest", help="ingest every stored report again with this version of Goodput "
                                        "(from the kept, scrubbed exports), then analyze the runs again")
    p.add_argument("--run", type=int, action="append", default=[], metavar="ID",
                   help="only this run (repeatable); default: every run")
    p.set_defaults(func=cmd_reingest)


def _settings():
    from goodput_cli.admin import _settings as settings

    return settings()


def cmd_retry(args: argparse.Namespace) -> int:
    from app.errors import ApiError
    from app.services.jobs.operations import retry_run

    settings = _settings()
    with _session() as session:
        try:
            out = retry_run(session, settings, args.run)
        except ApiError as exc:
            raise UsageError(f"retry: {exc.message}") from None
    if out.reports:
        print(f"run {args.run}: reports {', '.join(map(str, out.reports))} queued for ingest again")
    if out.analyze_run is not None:
        print(f"run {args.run}: analysis queued again")
    if out.missing:
        print(f"run {args.run}: reports {', '.join(map(str, out.missing))} cannot be retried: their stored "
              "export is gone; upload them again", file=sys.stderr)
    return 0


def cmd_reanalyze(args: argparse.Namespace) -> int:
    from app.errors import ApiError
    from app.ids import valid_id
    from app.services.jobs.runs import reanalyze
    from app.services.runs.window_fit import check_window_fits

    if not valid_id(args.run):
        raise UsageError(f"reanalyze: run {args.run} does not exist")
    settings = _settings()
    with _session() as session:
        try:
            check_window_fits(session, settings, args.run, args.window)  # as the API and the form check it
            run = reanalyze(session, settings, args.run, args.window)
        except ApiError as exc:
            raise UsageError(f"reanalyze: {' '.join(exc.message.split())}") from None
        print(f"run {args.run}: analysis with window {run.analysis_window} {run.analysis_status}")
    return 0


def cmd_reingest(args: argparse.Namespace) -> int:
    from app.services.jobs.operations import reingest_all

    settings = _settings()
    with _session() as session:
        out = reingest_all(session, settings, args.run or None)
    print(f"{fmt.count(len(out.reports))} report(s) queued for ingest again; the workers take them in order")
    if out.missing:
        print(f"{fmt.count(len(out.missing))} report(s) skipped: their stored export is gone (GOODPUT_KEEP_UPLOADS_DAYS "
              f"or deleted): {', '.join(map(str, out.missing[:20]))}", file=sys.stderr)
    return 0
