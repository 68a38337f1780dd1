"""`goodput worker` with test-only fault hooks, so fault tests can crash or slow one ingest on purpose.

The hooks wrap ``analysis.api.ingest`` in this process (and the pool processes it forks), keyed by the
upload's SHA-256 (its stored file name): ``GOODPUT_TEST_POISON`` lists hashes whose ingest kills the
process running it (SIGKILL), ``GOODPUT_TEST_SLOW`` lists ``sha=seconds`` to sleep before ingesting;
``GOODPUT_TEST_HOLD_GIL``, ``GOODPUT_TEST_HOLD_AFTER_COPY``, ``GOODPUT_TEST_FREE_BYTES`` and ``GOODPUT_TEST_KILL_ANALYSIS`` are
described at their functions.
Production code has no hook; only this entry point, which tests start, installs them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def install_hooks() -> None:
    import analysis.api as api

    poison = set(filter(None, os.environ.get("GOODPUT_TEST_POISON", "").split(",")))
    slow = dict(item.split("=", 1) for item in filter(None, os.environ.get("GOODPUT_TEST_SLOW", "").split(",")))
    frozen = set(filter(None, os.environ.get("GOODPUT_TEST_HOLD_GIL", "").split(",")))
    real = api.ingest

    def ingest(src, out, **kwargs):
        name = Path(src).name.split(".")[0]  # the SHA-256; stored names keep the upload's suffix
        if name in poison:
            os.kill(os.getpid(), signal.SIGKILL)
        if name in slow:
            time.sleep(float(slow[name]))
        if name in frozen:
            _hold_the_gil()
        return real(src, out, **kwargs)

    api.ingest = ingest
    _install_analysis_kill()
    _install_copy_hold()
    _install_fake_free_space()


def _hold_the_gil() -> None:
    """``GOODPUT_TEST_HOLD_GIL=sha,...``: what a hostile string did to the scrub (issue #45): one regular
    expression search in C that is quadratic on its input, holding the GIL for minutes; no signal handler,
    thread or soft time limit of this process runs meanwhile."""
    import re

    re.search(r"[A-Za-z_][A-Za-z0-9_%]*=", "a" * 3_000_000)


def _install_analysis_kill() -> None:
    """``GOODPUT_TEST_KILL_ANALYSIS=label,...``: the per-report analysis of a report with that label kills the
    process running it (SIGKILL) once its facts are half written, the first time only (a marker file in
    GOODPUT_DATA_DIR remembers it), like a worker lost in the middle of the task."""
    labels = set(filter(None, os.environ.get("GOODPUT_TEST_KILL_ANALYSIS", "").split(",")))
    if not labels:
        return
    import analysis.run.runner as runner

    real = runner.analyze_report

    def analyze_report(path, label, ctx, facts_dir=None, **kwargs):
        marker = Path(os.environ["GOODPUT_DATA_DIR"]) / f"killed-analysis-{label}"
        if label in labels and not marker.exists():
            real(path, label, ctx, facts_dir, **kwargs)  # its facts are on disk, its result is not
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, label, ctx, facts_dir, **kwargs)

    runner.analyze_report = analyze_report


def _install_copy_hold() -> None:
    """``GOODPUT_TEST_HOLD_AFTER_COPY=sha=seconds``: sleep after the bulk copy wrote its temporary DuckDB file
    and before it is published, so a test can kill the worker while the attempt's temporary files exist."""
    from analysis.readers.nsys.spawn import IngestChild

    hold = dict(item.split("=", 1) for item in
                filter(None, os.environ.get("GOODPUT_TEST_HOLD_AFTER_COPY", "").split(",")))
    real = IngestChild.run

    def run(self, plan, deadline, progress, **kwargs):
        result = real(self, plan, deadline, progress, **kwargs)
        name = Path(plan["src"]).name.split(".")[0]
        if name in hold:
            time.sleep(float(hold[name]))
        return result

    IngestChild.run = run


def _install_fake_free_space() -> None:
    """``GOODPUT_TEST_FREE_BYTES=n``: the data directory's file system reports n bytes free (a fake
    ``statvfs`` for paths under GOODPUT_DATA_DIR), like a small, nearly full volume."""
    free = os.environ.get("GOODPUT_TEST_FREE_BYTES")
    if not free:
        return
    data_dir = str(Path(os.environ["GOODPUT_DATA_DIR"]).resolve())
    real = os.statvfs

    def statvfs(path):
        st = real(path)
        if not str(Path(path).resolve()).startswith(data_dir):
            return st
        blocks = int(free) // st.f_frsize
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, blocks, blocks, st.f_files, st.f_ffree,
                                  st.f_favail, st.f_flag, st.f_namemax))

    os.statvfs = statvfs


if __name__ == "__main__":
    install_hooks()
    from goodput_cli.main import main

    sys.exit(main(["worker", *sys.argv[1:]]))
