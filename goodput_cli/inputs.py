"""Turning the offline commands' FILE arguments into ingested reports: exports are ingested, DuckDB files reused.

Latency matters here (a person waits for every command): the isolated ingest child of the first export
is started before anything else, and the analysis code is imported on a thread while the child copies,
so that Python's start-up, DuckDB's and the imports overlap instead of adding up. Nothing is cached
between commands.
"""

from __future__ import annotations

import importlib
import threading
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
    except OSError:
        return False


# What the analysis will import anyway. (Not pandas: DuckDB's Python module imports it when a query binds
# parameters, so analysis.model.trace writes scalar parameters into the SQL as typed literals instead.)
PRELOAD = ("analysis.run.runner",)


def _preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)


def preload_analysis() -> threading.Thread:
    """Import the analysis code on a thread while the ingest child copies: the main thread only waits."""
    thread = threading.Thread(target=_preload, name="goodput-preload", daemon=True)
    thread.start()
    return thread


# `goodput analyze` reads each ingested file once: below this size the ingest does not store the loop's iterations
# (a write and a reopen of the file, 0.09 s of CPU on a 1 MB export, the largest step after the copy), since the
# analysis finds the same loop and records itself. Larger exports keep them: their analysis is measured with them.
ONE_SHOT_MAX_BYTES = 64 * 2**20


def _out(i: int, tmp: Path) -> Path:
    return Path(tmp) / f"{i}.duckdb"


def start_first(files: list[Path], tmp: Path) -> dict[int, Any]:
    """The ingest child of the first FILE when it is an SQLite export, started before anything else (the
    options' checks import the rules): ``prepare(..., children=)`` takes it over. Empty when the first
    FILE is not an export; the caller discards what it gets if it fails before ``prepare``."""
    if not files or not files[0].is_file() or not _is_sqlite(files[0]):
        return {}
    from analysis.limits import Limits
    from analysis.readers.nsys.ingest import start_child  # the library's facade imports far more

    return {0: start_child(_out(0, tmp), Limits())}


def discard(children: dict[int, Any]) -> None:
    for child in children.values():
        child.discard()


def prepare(files: list[Path], tmp: Path, progress: Progress, limits: Limits | None = None,
            children: dict[int, Any] | None = None, once: bool = False) -> list[Path]:
    """The DuckDB file of each FILE, in order: DuckDB files as they are, exports ingested into ``tmp``.

    ``children``: ingest children already started (``start_first``, default limits), taken over here.
    ``once``: the files are analyzed once (``ONE_SHOT_MAX_BYTES``)."""
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
            preload_analysis()
        for n, i in enumerate(todo):
            if n + 1 < len(todo):
                start(todo[n + 1])  # the next child starts up while this one copies
            progress.file(files[i].name)
            progress.reset()
            try:
                ingest(files[i], outs[i], limits=limits, progress=progress.stage, child=children.pop(i, None),
                       summarize=False, iterations=not once or files[i].stat().st_size > ONE_SHOT_MAX_BYTES)
            except TraceError as exc:
                raise one_line(files[i], exc) from None
    finally:
        discard(children)
    return outs


def check_report(src: Path) -> str:
    """The tool of a DuckDB FILE given on the command line; BadInput when Goodput did not write it."""
    from analysis.api import check_normalized_report
    from analysis.errors import TraceError

    try:
        return check_normalized_report(src)
    except TraceError as exc:
        raise one_line(src, exc) from None
