"""Subcommands that run or talk to the service: `serve`, `worker`, `beat`, `upload`.

`serve` is what `make run` calls: migrate, then a supervisor over three child processes (gunicorn,
one Celery worker on both queues, Celery beat), each in its own process group so Ctrl-C stops them
in order; a child that dies is restarted with backoff. The embedded broker is kombu's SQLAlchemy transport on ``data/broker.sqlite``: it needs no
server, and the reconcile task covers what it cannot (it forgets deliveries of a killed worker).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from analysis import fmt
from goodput_cli import upload
from goodput_cli.errors import UsageError

# The CLI in a child process. Not `python -m goodput_cli.main`: that would load main.py twice (as
# __main__ too), and its `except UsageError` would not catch the other copy's class.
GOODPUT_CMD = [sys.executable, "-c", "import sys; from goodput_cli.main import main; sys.exit(main())"]

# How long children get to finish in-flight work after SIGTERM before they are killed.
STOP_GRACE_S = 20.0
# gunicorn worker processes `goodput serve` starts (its --workers default).
WEB_WORKERS = 2


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the service subcommands."""
    p = sub.add_parser("serve", help="migrate, then run the web server, a worker and beat (what `make run` does)")
    p.add_argument("--workers", type=int, default=WEB_WORKERS,
                   help=f"gunicorn worker processes (default {WEB_WORKERS})")
    p.add_argument("--concurrency", type=int, default=2, help="Celery worker processes (default 2)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("worker", help="run a Celery worker (ingest and analysis)")
    p.add_argument("--queues", default="ingest,light", help="comma-separated queues (default ingest,light)")
    p.add_argument("--concurrency", type=int, default=None, help="processes (default: CPU count)")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("beat", help="run Celery beat (schedules reconcile)")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=cmd_beat)

    upload.add_command(sub)


def _settings():
    from app.settings import Settings, SettingsError

    try:
        return Settings.from_env()
    except SettingsError as exc:
        raise UsageError(f"configuration: {exc}") from None


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.celery_app import make_celery

    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    argv = ["worker", "-Q", args.queues, f"--loglevel={args.loglevel}", "-n", f"goodput-{os.getpid()}@%h",
            # Leases in the DB track liveness; Celery's own chatter between workers adds nothing.
            "--without-mingle", "--without-gossip", "--without-heartbeat"]
    if args.concurrency:
        argv += ["--concurrency", str(args.concurrency)]
    make_celery(settings).worker_main(argv)
    return 0


def cmd_beat(args: argparse.Namespace) -> int:
    from workers.celery_app import make_celery

    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    schedule = settings.data_dir / "celerybeat-schedule"
    make_celery(settings).start(["beat", f"--loglevel={args.loglevel}", "-s", str(schedule)])
    return 0


def ensure_admin_token(settings) -> str | None:
    """Create an admin token when the DB has none; returns its secret (shown once), else None."""
    import sqlalchemy as sa

    from app.db import engine_for, make_sessionmaker, session_scope
    from app.models import ApiToken
    from app.services.accounts.tokens import create_token

    engine = engine_for(settings)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            if session.execute(sa.select(sa.func.count()).select_from(ApiToken)).scalar_one():
                return None
            return create_token(session, "admin (created by goodput serve)", "admin").token
    finally:
        engine.dispose()


# Threads per web worker process: each request (an upload, a page) holds one while it runs; a client still
# sending its headers holds none (goodput_cli.web_worker).
WEB_THREADS = 16
WEB_WORKER_CLASS = "goodput_cli.web_worker.HeadFirstWorker"
MAX_REQUEST_LINE = 8190  # goodput_cli.web_worker.MAX_REQUEST_LINE, without importing gunicorn here


def web_command(bind: str, workers: int = WEB_WORKERS) -> list[str]:
    """The web server's command line, as `goodput serve` runs it; the service benchmarks
    (benchmarks/_server.py) start exactly this too. docker-compose.yml's web service runs the same options
    with its own worker count. The worker class is gunicorn's threaded one reading request heads without a
    thread (slow clients hold nothing); its main loop never blocks, so a worker silent for --timeout is hung."""
    return [sys.executable, "-m", "gunicorn", "--bind", bind, "--workers", str(workers),
            "--worker-class", WEB_WORKER_CLASS, "--threads", str(WEB_THREADS), "--timeout", "30",
            # Request lines up to the worker's own limit reach the app, which answers URIs over 4,000 bytes
            # with its JSON 414; longer ones get the same answer from the worker.
            "--limit-request-line", str(MAX_REQUEST_LINE),
            "--graceful-timeout", str(int(STOP_GRACE_S) // 2), "--no-control-socket",
            "--access-logfile", "-", "app:create_app()"]


def _children(settings, args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    return [
        ("web", web_command(f"{settings.host}:{settings.port}", args.workers)),
        ("worker", [*GOODPUT_CMD, "worker", "--concurrency", str(args.concurrency)]),
        ("beat", [*GOODPUT_CMD, "beat"]),
    ]


def cmd_serve(args: argparse.Namespace) -> int:
    from app.db import upgrade

    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    print(f"goodput: migrating {settings.resolved_database_url.split('@')[-1]}", file=sys.stderr)
    upgrade(settings.resolved_database_url)
    token = ensure_admin_token(settings)
    if token:
        print(f"goodput: admin token (shown once, keep it): {token}", flush=True)
        print("goodput: to sign in to the web UI, create a user: goodput user create NAME --admin", flush=True)
    return supervise(_children(settings, args), url=f"http://{settings.host}:{settings.port}/")


# A child that exits is started again after this delay, doubled on each quick exit up to the maximum; one
# that ran this long before exiting starts over at the first delay.
BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_S = 60.0


def _say(message: str) -> None:
    print(f"goodput: {message}", file=sys.stderr, flush=True)


def supervise(children: list[tuple[str, list[str]]], *, url: str = "", backoff_start_s: float = BACKOFF_START_S,
              backoff_max_s: float = BACKOFF_MAX_S, stable_s: float = STABLE_S) -> int:
    """Run the children until SIGINT/SIGTERM, then stop all of them; returns 0.

    A child that exits or is killed (a worker hit by the OOM killer, beat killed by hand) is logged and
    started again with exponential backoff; the others keep running. Job state lives in the metadata DB,
    so whatever a killed worker held is re-queued by reconcile when its lease expires.
    """
    stopping = {"sig": 0}

    def on_signal(signum, _frame) -> None:
        stopping["sig"] = signum

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    procs: dict[str, subprocess.Popen | None] = {}
    started: dict[str, float] = {}
    delay = {name: backoff_start_s for name, _ in children}
    due = {name: 0.0 for name, _ in children}
    try:
        for name, argv in children:
            # Own process group: the terminal's Ctrl-C reaches only us, and we stop children in order.
            procs[name] = subprocess.Popen(argv, start_new_session=True)
            started[name] = time.monotonic()
        if url:
            _say(f"serving on {url} (Ctrl-C stops)")
        while not stopping["sig"]:
            now = time.monotonic()
            for name, argv in children:
                proc = procs[name]
                if proc is not None and proc.poll() is not None:
                    ran = now - started[name]
                    if ran >= stable_s:
                        delay[name] = backoff_start_s
                    _signal_group(proc, signal.SIGKILL)  # its orphans (a killed worker's pool processes)
                    code = proc.returncode
                    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
                    _say(f"{name} (pid {proc.pid}) {how} after {fmt.elapsed(ran)}; restarting it in {fmt.exact(delay[name])} s")
                    procs[name], due[name] = None, now + delay[name]
                    delay[name] = min(backoff_max_s, delay[name] * 2)
                if procs[name] is None and now >= due[name]:
                    proc = procs[name] = subprocess.Popen(argv, start_new_session=True)
                    started[name] = now
                    _say(f"{name} restarted (pid {proc.pid})")
            time.sleep(0.2)
    finally:
        _stop_all([(name, proc) for name, proc in procs.items() if proc is not None])
        for s, handler in old.items():
            signal.signal(s, handler)
    return 0


def _stop_all(procs: list[tuple[str, subprocess.Popen]]) -> None:
    # The web server first (no new work), then beat, then the worker (finishes its current task).
    order = sorted(procs, key=lambda p: {"web": 0, "beat": 1}.get(p[0], 2))
    for _name, proc in order:
        # SIGTERM to the main process only: it stops its own children gracefully (Celery's warm
        # shutdown lets the pool finish its tasks); the whole group gets SIGKILL if it overstays.
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for _name, proc in order:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"goodput: {_name} did not stop in {fmt.exact(STOP_GRACE_S)} s; killing it", file=sys.stderr)
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        _signal_group(proc, signal.SIGKILL)  # leftovers of its group (e.g. an orphaned pool process)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


