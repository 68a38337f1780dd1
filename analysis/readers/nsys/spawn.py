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
import time
import uuid
from pathlib import Path
from typing import NotRequired, TypedDict, cast

import analysis
from analysis.errors import TraceError
from analysis.limits import Limits, Progress

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
    """The child's last protocol line (``child._say``): whether it succeeded; on success the rows it copied per table
    and the network rows (None when it did not derive them); on failure the kind of error and its text."""

    ok: bool
    counts: NotRequired[dict[str, int]]
    net: NotRequired[int | None]
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

    def run(self, plan: dict, deadline: float, progress: Progress | None) -> ChildDone:
        """Send the plan, relay progress until the child's last line; TraceError on failure or deadline."""
        proc = self.proc
        last: ChildDone | None = None
        stderr = ""
        try:
            assert proc.stdin and proc.stdout and proc.stderr
            try:
                proc.stdin.write(json.dumps(plan) + "\n")
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the child died during set-up; its stderr and exit status say why
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TraceError("timeout", "normalizing the export took longer than the configured limit; "
                                     "export a shorter time range or raise the limit")
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                line = proc.stdout.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # not ours (a library writing to stdout); the protocol lines are JSON objects
                if not isinstance(msg, dict) or msg.get("ready"):
                    continue
                if "ok" in msg:
                    last = cast("ChildDone", msg)  # the child's last line (``child._say``)
                elif progress is not None:
                    progress(msg["stage"], msg["done"], msg["total"])
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            stderr = proc.stderr.read()
        except subprocess.TimeoutExpired:
            raise TraceError("timeout", "normalizing the export took longer than the configured limit") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if last is None or not last.get("ok") or proc.returncode != 0:
            if stderr:
                logger.warning("nsys ingest child failed: %s", stderr[-2000:])
            raise child_error(last, proc.returncode, stderr)
        return last


def start_child(out: Path, limits: Limits) -> IngestChild:
    """Start the bulk-copy child for ``out`` now, before validation; pass it to
    ``analysis.readers.nsys.ingest.ingest_nsys(child=)``. Imports no DuckDB: the CLI starts it first thing."""
    return IngestChild(Path(out), threads=limits.threads,
                       address_space_bytes=limits.memory_bytes + ADDRESS_SLACK_BYTES,
                       duckdb_memory_bytes=int(limits.memory_bytes * DUCKDB_SHARE_OF_CAP))
