"""Readers: the input kinds Goodput reads (nsys SQLite exports, ncu CSVs, NCCL debug logs), the one interface
each reader meets (``Reader``: detect, ingest, summarize, which step analyses it) and their registry.

Nothing is registered at import: ``analysis.input_kinds.default_readers()`` lists the readers explicitly
and builds the registry on first use; a second reader for one kind fails there, never silently wins.
This module is standard library only (the CLI imports it before anything heavy).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from analysis.report_types import ReportInfo


class ToolKind(enum.StrEnum):
    """The tool an input comes from: a report's ``kind`` in the metadata DB and ``tool`` in its summary."""

    NSYS = "nsys"
    NCU = "ncu"
    NCCL = "nccl"


class AnalysisStep(enum.StrEnum):
    """Which step of a run's analysis (``analysis.run.runner``) analyses a reader's reports."""

    # On its own, right after ingest (the service: one task per report); the run step reads what it saved.
    REPORT = "report"
    # Inside the run-level step, once the run's other reports are done (small inputs that link to them).
    RUN = "run"


@dataclass
class Probe:
    """The start of an input, read once for every reader's ``detect``; ``more`` reads further on demand
    (an ncu CSV or an NCCL log can open with pages of the program's own output)."""

    path: Path
    size: int
    head: bytes
    _more: dict[int, bytes] = field(default_factory=dict, repr=False)

    def more(self, n: int) -> bytes:
        """The first ``n`` bytes (at most the file)."""
        if n <= len(self.head):
            return self.head[:n]
        if n not in self._more:
            with self.path.open("rb") as fh:
                self._more[n] = fh.read(n)
        return self._more[n]


class Reader(Protocol):
    """One input kind. ``detect`` answers from the probe (True: mine; raises ``TraceError`` for a form of
    mine this machine cannot read, e.g. a binary report without its converter); ``ingest`` writes the
    normalized DuckDB file atomically (nothing at ``out`` on error) and returns the scrubbed copy it kept
    (None); ``summarize`` reads the headline facts (``info``) back from that file; ``check_meta`` raises
    ``TraceError`` when a DuckDB file's ``meta`` was written by another schema version."""

    kind: ToolKind
    step: AnalysisStep
    #: What the input is, for messages ("an nsys SQLite export").
    description: str

    def detect(self, probe: Probe, *, converted_elsewhere: bool = False) -> bool: ...

    def takes_child(self, src: Path) -> bool: ...

    def ingest(self, src: Path, out: Path, *, limits: Any, progress: Callable[[str, int, int], None] | None,
               child: Any, keep: Path | None, iterations: bool = True) -> Path | None:
        """Write the normalized file ``out``; ``iterations=False``: skip derived tables a file analyzed once
        does not need (the nsys loop's stored iterations). Returns the kept (scrubbed) copy, if any."""
        ...

    def summarize(self, out: Path, name: str) -> ReportInfo: ...

    def check_meta(self, meta: Mapping[str, str]) -> None: ...


class DuplicateReader(ValueError):
    """Two readers registered for one kind."""


class ReaderRegistry:
    """The readers by kind, in detection order (the first whose ``detect`` says yes reads the input)."""

    def __init__(self) -> None:
        self._readers: dict[ToolKind, Reader] = {}

    def register(self, reader: Reader) -> Reader:
        kind = ToolKind(reader.kind)
        if kind in self._readers:
            raise DuplicateReader(f"a reader for {kind.value!r} is registered already "
                                  f"({type(self._readers[kind]).__name__}); not replacing it with "
                                  f"{type(reader).__name__}")
        self._readers[kind] = reader
        return reader

    def get(self, kind: str) -> Reader:
        """The reader of ``kind``; KeyError for a kind no reader reads."""
        try:
            return self._readers[ToolKind(kind)]
        except ValueError:
            raise KeyError(kind) from None

    def __iter__(self) -> Iterator[Reader]:
        return iter(self._readers.values())

    def __len__(self) -> int:
        return len(self._readers)

    def kinds(self) -> tuple[ToolKind, ...]:
        return tuple(self._readers)

    def detect(self, probe: Probe, *, converted_elsewhere: bool = False) -> Reader | None:
        """The first reader that recognises the input, or None."""
        for reader in self._readers.values():
            if reader.detect(probe, converted_elsewhere=converted_elsewhere):
                return reader
        return None


__all__ = ["AnalysisStep", "DuplicateReader", "Probe", "Reader", "ReaderRegistry", "ToolKind"]
