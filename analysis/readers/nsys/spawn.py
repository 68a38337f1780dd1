"""The parent's side of the ingest child (``analysis.readers.nsys.child``): start it early, feed it, watch it, kill it.

``IngestChild.start`` launches the child with its limits before the export is validated, so the child's
start-up (Python, DuckDB, the sqlite_scanner extension) overlaps the parent's validation and imports;
the plan, and with it the export's path, is sent only after validation passed. A child that is never
given a plan exits without reading anything.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict, cast

import analysis
from analysis.errors import TraceError
from analysis.limits import Limits, Progress

if TYPE_CHECKING:
    from analysis.readers.nsys.guard import TableChecks

logger = logging.getLogger(__name__)

# ``Limits.memory_bytes`` is the child's memory budget. DuckDB's buffer pool gets this share of it; the
# rest covers allocator slack, strings in flight, code and stacks (10M-kernel benchmark: 1.6 GiB
# resident with a 1.2 GiB pool). A smaller pool made the (pid, correlationId) hash joins over 23M API
# calls spill to disk: the synchronization copy took 28 s instead of 15 s.
DUCKDB_SHARE_OF_CAP = 0.6
# RLIMIT_AS counts address space reserved but never touched (allocator extents, thread stacks): the same
# run peaked at 2.7 GiB virtual for 1.4 GiB resident. The cap is budget + this slack, a backstop
# against a runaway child rather than the budget itself.
ADDRESS_SLACK_BYTES = 2 * 1024**3


class ChildDone(TypedDict):
    """The child's last protocol line (``child._say``): whether it succeeded; on success the rows it copied per table,
    the network rows (None when it did not derive them) and the statements whose launch join fell back to the grouped
    launch table (a correlation id that repeats, ``normalize.Step.exact``); on failure the kind of error and its text."""

    ok: bool
    counts: NotRequired[dict[str, int]]
    net: NotRequired[int | None]
    regrouped: NotRequired[list[str]]
    kind: NotRequired[str]
    error: NotRequired[str]


def child_error(msg: ChildDone | None, returncode: int | None, stderr: str) -> TraceError:
    """The typed error for a failed child, from its last protocol line, exit status and stderr."""
    kind = msg.get("kind") if msg else None
    text = (msg.get("error") if msg else None) or stderr.strip().splitlines()[-1:] or [""]
    text = " ".join((text if isinstance(text, str) else text[0]).split())
    low = text.lower()
    if "no space left" in low or "disk full" in low:
        return TraceError("no_space", "the disk filled up while writing the normalized report; free space and retry")
    # Under RLIMIT_AS an exhausted child fails to map memory, throws bad_alloc or aborts (SIGABRT) when a
    # thread or buffer cannot be allocated; the kernel's OOM killer sends SIGKILL.
    starved = returncode in (-signal.SIGABRT, -signal.SIGKILL) and msg is None
    if starved or kind == "memory" or any(word in low for word in (
            "out of memory", "memory_limit", "could not allocate", "bad_alloc", "cannot allocate",
            "failed to map segment")):
        return TraceError("too_large", "reading the export needed more memory than the configured limit; "
                          "export a shorter time range or raise the memory limit")
    if kind in ("ParserException", "BinderException", "CatalogException"):
        # Our SQL is wrong for this export: Goodput's fault, not the file's.
        return TraceError("internal", f"Goodput's nsys reader failed on this export ({text[:300]}); "
                          "please report it with the nsys version")
    if msg is None and returncode is not None and returncode < 0:
        return TraceError("corrupt", f"the reader process died on this file (signal {-returncode}); the file is "
                          "probably damaged: export it again")
    return TraceError("corrupt", f"the export could not be read ({text[:300]}); it is damaged or was edited "
                      "by another tool: export it again")


class IngestChild:
    """One started child process, bound to the output path ``out`` it will write beside.

    Made by ``start_child``, which turns ``Limits`` into the child's caps.
    """

    def __init__(self, out: Path, *, threads: int, address_space_bytes: int, duckdb_memory_bytes: int) -> None:
        self.out = Path(out)
        self.tmp = self.out.parent / f".{self.out.name}.{uuid.uuid4().hex}.tmp"
        self.spill = Path(str(self.tmp) + ".spill")
        setup = {
            "tmp": str(self.tmp),
            "temp_directory": str(self.spill),
            "threads": int(threads),
            "address_space_bytes": int(address_space_bytes),
            "duckdb_memory_bytes": int(duckdb_memory_bytes),
        }
        env = dict(os.environ)
        # glibc reserves a 64 MiB arena per thread by default; under RLIMIT_AS that reservation alone can
        # starve DuckDB. Two arenas match our two DuckDB threads.
        env["MALLOC_ARENA_MAX"] = "2"
        root = str(Path(analysis.__file__).resolve().parents[1])  # the checkout (or site-packages) holding it
        # -P: the current directory is not put on sys.path, so the child runs this checkout's code, never
        # an ``analysis`` package that happens to sit in the caller's working directory.
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "analysis.readers.nsys.child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env, text=True)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(setup) + "\n")
        self.proc.stdin.flush()

    def leftovers(self) -> tuple[Path, ...]:
        return (self.tmp, Path(str(self.tmp) + ".wal"), self.spill)

    def abandon(self) -> None:
        """Stop a child that will get no plan (validation failed, or the caller gave up).

        Killed rather than waited for: it has read nothing from the export, and its start-up is not
        worth waiting on before an error message.
        """
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def discard(self) -> None:
        """``abandon`` and remove whatever the child had created (its empty output file)."""
        self.abandon()
        for p in self.leftovers():
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)

    def run(self, plan: dict, deadline: float, progress: Progress | None, *, checks: TableChecks | None = None,
            weights: Callable[[], list[int] | None] | None = None,
            checked: Callable[[], None] | None = None) -> ChildDone:
        """Send the plan, relay progress until the child's last line; TraceError on failure or deadline.

        ``checks``: the export's integrity checks, still running. The child runs a statement only once each table
        in the plan's ``needs`` for it has passed: a thread here sends it a ``go`` line per table as its check
        passes, then waits for the remaining tables' checks and calls ``checked``. A failed check kills the child
        and is the error raised. ``weights``: each statement's share of the progress, None while unknown."""
        proc = self.proc
        last: ChildDone | None = None
        stderr = ""
        gate = _Gate(proc, plan, checks, checked) if checks is not None else None
        try:
            assert proc.stdin and proc.stdout and proc.stderr
            try:
                proc.stdin.write(json.dumps(plan) + "\n")
                proc.stdin.flush()
                if gate is None:
                    proc.stdin.close()
            except BrokenPipeError:
                pass  # the child died during set-up; its stderr and exit status say why
            if gate is not None:
                gate.start()
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            for line in _lines(sel, proc.stdout.fileno(), deadline):
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # not ours (a library writing to stdout); the protocol lines are JSON objects
                if not isinstance(msg, dict) or msg.get("ready"):
                    continue
                if "ok" in msg:
                    last = cast("ChildDone", msg)  # the child's last line (``child._say``)
                elif progress is not None:
                    _relay(progress, msg, len(plan["statements"]), weights, checks)
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            stderr = proc.stderr.read()
            if gate is not None and gate.error is None and last is not None and last.get("ok"):
                gate.join(deadline)  # the copy is done: the tables it did not read must pass too
        except subprocess.TimeoutExpired:
            raise TraceError("timeout", "normalizing the export took longer than the configured limit") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if gate is not None:
                gate.stop()
        if gate is not None and gate.error is not None:
            raise gate.error  # a table failed its check: whatever the child did, nothing is published
        if last is None or not last.get("ok") or proc.returncode != 0:
            if stderr:
                logger.warning("nsys ingest child failed: %s", stderr[-2000:])
            raise child_error(last, proc.returncode, stderr)
        return last


def _lines(sel: selectors.BaseSelector, fd: int, deadline: float) -> Iterator[str]:
    """The child's stdout line by line, each as soon as it arrives, until the child closes it.

    Read from the file descriptor, not through the text stream: the stream's buffer may hold several lines
    after one ``select`` said the pipe was readable, and those would wait for the next line (or for the end)
    before anyone saw them, so the progress lagged behind the copy."""
    pending = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TraceError("timeout", "normalizing the export took longer than the configured limit; "
                             "export a shorter time range or raise the limit")
        if not sel.select(timeout=min(left, 1.0)):
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if pending:
                yield pending.decode(errors="replace")
            return
        *complete, pending = (pending + chunk).split(b"\n")
        for raw in complete:
            yield raw.decode(errors="replace") + "\n"


def _relay(progress: Progress, msg: dict, steps: int, weights: Callable[[], list[int] | None] | None,
           checks: TableChecks | None) -> None:
    """The child's step as progress in source rows (each step weighs the rows of the table it reads); while
    the tables' row counts are not all known (checks still running), the checks' own progress."""
    w = weights() if weights is not None else [1] * steps
    if w is None:
        if checks is not None:
            done, total = checks.progress
            progress("check", done, total)
        return
    step = min(int(msg["step"]), len(w))
    progress(msg["stage"], sum(w[:step]), sum(w))


class _Gate:
    """The thread that tells the child, table by table, that a table it reads has passed its integrity check."""

    def __init__(self, proc: subprocess.Popen, plan: dict, checks: TableChecks,
                 checked: Callable[[], None] | None) -> None:
        self.proc, self.checks, self.checked = proc, checks, checked
        needed = [t for step in (*(plan.get("varchar_needs") or ()), *plan["needs"]) for t in step]
        self.tables = list(dict.fromkeys(needed))  # in the order the child needs them
        self.error: TraceError | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._feed, name="ingest-gate", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _feed(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            for table in self.tables:
                self.checks.wait(table)
                try:
                    stdin.write(json.dumps({"go": [table]}) + "\n")
                    stdin.flush()
                except (BrokenPipeError, ValueError):
                    break  # the child is gone; its own last line says why
            try:
                stdin.close()
            except OSError:
                pass
            self.checks.wait_all()  # the tables the copy does not read
            if self.checked is not None and not self._stopping:
                self.checked()
        except Exception as exc:  # any failure here fails the ingest, raised in the caller's thread
            if self._stopping:
                return  # the ingest failed already, or succeeded without needing this thread any more
            self.error = exc if isinstance(exc, TraceError) else TraceError(
                "internal", f"checking the export failed ({type(exc).__name__}: {exc})"[:300])
            if self.proc.poll() is None:
                self.proc.kill()  # it may be copying a table whose check passed: nothing of it will be used

    def join(self, deadline: float) -> None:
        """Wait for the remaining checks (bounded by the ingest's deadline)."""
        self._thread.join(timeout=max(1.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            raise TraceError("timeout", "checking the export took longer than the configured limit; "
                             "export a shorter time range or raise the limit")

    def stop(self) -> None:
        self._stopping = True
        if self._thread.is_alive():
            self.checks.close()  # interrupts the checks the thread waits on
            self._thread.join()


def start_child(out: Path, limits: Limits) -> IngestChild:
    """Start the bulk-copy child for ``out`` now, before validation; pass it to
    ``analysis.readers.nsys.ingest.ingest_nsys(child=)``. Imports no DuckDB: the CLI starts it first thing."""
    return IngestChild(Path(out), threads=limits.threads,
                       address_space_bytes=limits.memory_bytes + ADDRESS_SLACK_BYTES,
                       duckdb_memory_bytes=int(limits.memory_bytes * DUCKDB_SHARE_OF_CAP))
