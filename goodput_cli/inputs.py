"""Turning the offline commands' FILE arguments into ingested reports: exports are ingested, DuckDB files reused.

Latency matters here (a person waits for every command): the isolated ingest child of the first export
is started before anything else, and the analysis code is imported on a thread while the child copies,
so that Python's start-up, DuckDB's and the imports overlap instead of adding up. Nothing is cached
between commands.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goodput_cli.progress import Progress

if TYPE_CHECKING:
    from analysis.api import Limits
    from analysis.errors import TraceError

# ``analysis.api.SQLITE_MAGIC``, here so that the first export's ingest child starts before the library is
# imported (its import overlaps the child's start-up instead of delaying it).
SQLITE_MAGIC = b"SQLite format 3\x00"


class BadInput(Exception):
    """One line for stderr: ``FILE: CODE: message``."""


def one_line(src: Path, exc: TraceError) -> BadInput:
    # Exactly one line on stderr, whatever the reader put in its message.
    return BadInput(f"{src}: {exc.code}: {' '.join(exc.message.split())}")


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except (OSError, ValueError):  # ValueError: a NUL or a lone surrogate in an argument that is no file name
        return False


# What the analysis will import anyway. (Not pandas: DuckDB's Python module imports it when a query binds
# parameters, so analysis.model.trace writes scalar parameters into the SQL as typed literals instead.)
# ``numpy.ma``: ``np.unique`` imports it on its first call (NumPy 2.4, 0.02 s), in the middle of the analysis.
PRELOAD = ("analysis.run.runner", "numpy.ma")


class Preload(threading.Thread):
    """``first`` (the options' checks beside a small ingest: ``prepare(checks=)``), then the imports of the
    analysis code, on a thread while the ingest child copies: the main thread only waits. What ``first``
    raised is kept in ``error``, for ``prepare`` to raise once the thread is joined."""

    def __init__(self, first: Callable[[], None] | None = None) -> None:
        super().__init__(name="goodput-preload", daemon=True)
        self.first = first
        self.error: BaseException | None = None
        # Set once the first export is validated (its child gets the plan) or there is none: the imports hold
        # the GIL, and beside them the validation (many short SQLite calls, each taking the GIL back) took
        # 0.13 s instead of 0.01 s, while the child waited for its plan.
        self.go = threading.Event()
        if first is None:
            self.go.set()

    def run(self) -> None:
        self.go.wait()
        if self.first is not None:
            try:
                self.first()
            except BaseException as exc:  # raised in the main thread by ``prepare``
                self.error = exc
                return
        for name in PRELOAD:
            importlib.import_module(name)


def preload_analysis(first: Callable[[], None] | None = None) -> Preload:
    """Start a ``Preload`` thread."""
    thread = Preload(first)
    thread.start()
    return thread


# `goodput analyze` reads each ingested file once: below this size the ingest does not store the loop's iterations
# (a write and a reopen of the file, 0.09 s of CPU on a 1 MB export, the largest step after the copy), since the
# analysis finds the same loop and records itself. Larger exports keep them: their analysis is measured with them.
ONE_SHOT_MAX_BYTES = 64 * 2**20


# A small export's DuckDB copy lives for one command: in memory (a tmpfs) its writes cost no disk I/O, and the
# fsyncs of the ingest (the child's commits and checkpoint, the publish's file and folder) return at once instead
# of waiting for the disk's journal: 1-30 ms each, at times far longer, on a machine that writes elsewhere
# (docs/speed.md, seventh round). Only for exports of at most ``SCRATCH_MAX_BYTES`` together (their copies are a
# few MB: 3.7 MiB at most in the corpus), where the tmpfs has room for ``SCRATCH_ROOM`` times their size beside
# ``SCRATCH_SPARE_BYTES``, and when TMPDIR names no folder.
SCRATCH = Path("/dev/shm")
SCRATCH_MAX_BYTES = 16 * 2**20
SCRATCH_ROOM = 8
SCRATCH_SPARE_BYTES = 256 * 2**20


def scratch_dir(args: list[str]) -> str | None:
    """The folder for the command's temporary folder (``tempfile``'s ``dir``): ``SCRATCH`` for small exports, else
    None (TMPDIR, or the system's temporary folder). ``args``: the command's arguments (those naming no file
    are skipped)."""
    if os.environ.get("TMPDIR"):
        return None  # the caller's choice
    try:
        size = sum(p.stat().st_size for a in args if not a.startswith("-") and (p := Path(a)).is_file())
        free = os.statvfs(SCRATCH)
    except (OSError, ValueError):  # ValueError: a NUL in an argument
        return None
    room = free.f_bavail * free.f_frsize
    if size > SCRATCH_MAX_BYTES or room < SCRATCH_ROOM * size + SCRATCH_SPARE_BYTES:
        return None
    return str(SCRATCH) if os.access(SCRATCH, os.W_OK | os.X_OK) else None


def _out(i: int, tmp: Path) -> Path:
    return Path(tmp) / f"{i}.duckdb"


def start_first(files: list[Path], tmp: Path) -> dict[int, Any]:
    """The ingest child of the first FILE when it is an SQLite export, started before anything else (the
    options' checks import the rules): ``prepare(..., children=)`` takes it over. Empty when the first
    FILE is not an export; the caller discards what it gets if it fails before ``prepare``."""
    if not files or not files[0].is_file() or not _is_sqlite(files[0]):
        return {}
    from analysis.limits import Limits
    from analysis.readers.nsys.spawn import start_child  # no DuckDB: the library's facade imports far more

    return {0: start_child(_out(0, tmp), Limits())}


def discard(children: dict[int, Any]) -> None:
    for child in children.values():
        child.discard()


class Early:
    """`goodput analyze`'s temporary folder and, when an argument is an SQLite export, an ingest child started
    for its first FILE before the command's modules are imported and its arguments parsed (``start_early``).

    The child is bound to the output ``0.duckdb`` in ``tmp``, not to a FILE: it reads nothing before
    ``prepare`` sends it the plan of a validated export, so a guess that the first FILE is an export costs at
    most a child discarded unused (``take``)."""

    def __init__(self, children: dict[int, Any], tmp: tempfile.TemporaryDirectory[str]) -> None:
        self.children = children
        self.tmp = tmp

    def take(self, files: list[Path]) -> dict[int, Any]:
        """The children ``start_first(files, tmp)`` would start: the early child when the first FILE is an
        SQLite export, else none (the early child is discarded)."""
        children, self.children = self.children, {}
        if children and (not files or not files[0].is_file() or not _is_sqlite(files[0])):
            discard(children)
            return {}
        return children

    def close(self) -> None:
        discard(self.children)
        self.children = {}
        self.tmp.cleanup()


_early: Early | None = None


def start_early(argv: list[str]) -> None:
    """For `goodput analyze ... FILE ...` with an SQLite export among its arguments: make the command's temporary
    folder and start the ingest child of output 0 now, so that its start-up (Python, DuckDB, the signed
    scanner: 0.25 s of CPU) begins before the parent's own imports and argument parsing instead of after
    them. ``take_early`` hands them over; ``drop_early`` discards what was not taken."""
    global _early
    drop_early()
    if argv[:1] != ["analyze"] or not any(not a.startswith("-") and _is_sqlite(Path(a)) for a in argv[1:]):
        return
    tmp = tempfile.TemporaryDirectory(prefix="goodput-", dir=scratch_dir(argv[1:]))
    try:
        from analysis.limits import Limits
        from analysis.readers.nsys.spawn import start_child

        _early = Early({0: start_child(_out(0, Path(tmp.name)), Limits())}, tmp)
    except BaseException:
        tmp.cleanup()
        raise


def take_early() -> Early | None:
    """What ``start_early`` started, now owned by the caller (which ``close``s it); None when nothing was."""
    global _early
    early, _early = _early, None
    return early


def drop_early() -> None:
    """Discard what ``start_early`` started and nobody took (a parse error, `--help`, another command)."""
    early = take_early()
    if early is not None:
        early.close()


def prepare(files: list[Path], tmp: Path, progress: Progress, limits: Limits | None = None,
            children: dict[int, Any] | None = None, once: bool = False,
            checks: Callable[[], None] | None = None) -> list[Path]:
    """The DuckDB file of each FILE, in order: DuckDB files as they are, exports ingested into ``tmp``.

    ``children``: ingest children already started (``start_first``, default limits), taken over here.
    ``once``: the files are analyzed once (``ONE_SHOT_MAX_BYTES``). ``checks``: the options' checks, run on a
    thread beside the ingest (they import every rule: as long as a small export's whole copy); what they raise
    is raised here once they are done, before (and instead of) any error of the ingest."""
    if checks is None:
        return _prepare(files, tmp, progress, limits, children, once)
    for name in ("analysis.api", "analysis.input_kinds"):  # the ingest's code, before the thread imports the rules
        importlib.import_module(name)
    preload = preload_analysis(checks)
    try:
        outs = _prepare(files, tmp, progress, limits, children, once, preload)
    except BaseException:
        preload.go.set()
        preload.join()
        if preload.error is not None:
            raise preload.error from None
        raise
    preload.go.set()
    preload.join()
    if preload.error is not None:
        raise preload.error
    return outs


def _prepare(files: list[Path], tmp: Path, progress: Progress, limits: Limits | None,
             children: dict[int, Any] | None, once: bool, preload: Preload | None = None) -> list[Path]:
    from analysis.api import Limits, ingest, is_normalized_report, start_ingest_child
    from analysis.errors import TraceError

    children = dict(children or {})
    if children and limits is not None and limits != Limits():
        discard(children)  # started with the default limits
        children = {}
    limits = limits or Limits()
    try:
        for src in files:
            if not src.is_file():
                raise BadInput(f"{src}: not_found: no such file")
    except BaseException:
        discard(children)
        raise
    outs = [src if is_normalized_report(src) else _out(i, tmp) for i, src in enumerate(files)]
    todo = [i for i, src in enumerate(files) if outs[i] != src]

    def start(i: int) -> None:
        if i in todo and _is_sqlite(files[i]) and i not in children:
            children[i] = start_ingest_child(outs[i], limits)

    try:
        for i, src in enumerate(files):
            if i not in todo:
                check_report(src)  # before any ingest: a bad FILE fails fast
        if todo:
            start(todo[0])
            if preload is None:
                preload_analysis()
        for n, i in enumerate(todo):
            if n + 1 < len(todo):
                start(todo[n + 1])  # the next child starts up while this one copies
            progress.file(files[i].name)
            progress.reset()
            try:
                ingest(files[i], outs[i], limits=limits, progress=_stages(progress, preload), child=children.pop(i, None),
                       summarize=False, iterations=not once or files[i].stat().st_size > ONE_SHOT_MAX_BYTES)
            except TraceError as exc:
                raise one_line(files[i], exc) from None
    finally:
        discard(children)
    return outs


def _stages(progress: Progress, preload: Preload | None) -> Callable[[str, int, int], None]:
    """``progress.stage``, which also lets ``preload`` go once the ingest is past its validation."""
    if preload is None or preload.go.is_set():
        return progress.stage

    def stage(label: str, done: int, total: int) -> None:
        if label != "validate" or done >= total:  # validated: the child has its plan
            preload.go.set()
        progress.stage(label, done, total)

    return stage


def check_report(src: Path) -> str:
    """The tool of a DuckDB FILE given on the command line; BadInput when Goodput did not write it."""
    from analysis.api import check_normalized_report
    from analysis.errors import TraceError

    try:
        return check_normalized_report(src)
    except TraceError as exc:
        raise one_line(src, exc) from None
