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
from typing import Any

from analysis.api import SQLITE_MAGIC, Limits, ingest, is_normalized_report, start_ingest_child
from analysis.errors import TraceError
from goodput_cli.progress import Progress


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


def prepare(files: list[Path], tmp: Path, progress: Progress, limits: Limits | None = None) -> list[Path]:
    """The DuckDB file of each FILE, in order: DuckDB files as they are, exports ingested into ``tmp``."""
    limits = limits or Limits()
    for src in files:
        if not src.is_file():
            raise BadInput(f"{src}: not_found: no such file")
    outs = [src if is_normalized_report(src) else Path(tmp) / f"{i}.duckdb" for i, src in enumerate(files)]
    todo = [i for i, src in enumerate(files) if outs[i] != src]
    children: dict[int, Any] = {}

    def start(i: int) -> None:
        if i in todo and _is_sqlite(files[i]) and i not in children:
            children[i] = start_ingest_child(outs[i], limits)

    for i, src in enumerate(files):
        if i not in todo:
            check_report(src)  # before any ingest: a bad FILE fails fast
    try:
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
                       summarize=False)
            except TraceError as exc:
                raise one_line(files[i], exc) from None
    finally:
        for child in children.values():
            child.discard()
    return outs


def check_report(src: Path) -> str:
    """The tool of a DuckDB FILE given on the command line; BadInput when Goodput did not write it."""
    from analysis.api import check_normalized_report

    try:
        return check_normalized_report(src)
    except TraceError as exc:
        raise one_line(src, exc) from None
