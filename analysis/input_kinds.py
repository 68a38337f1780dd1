"""Every input kind Goodput reads, registered in one place: each reader of ``analysis.readers`` bound to
what sits above the readers layer (the loop finder its ingest derives tables with, the summary read back).

``default_readers()`` lists them explicitly, in detection order (an SQLite export first, then the text
formats: an ncu CSV before an NCCL log, since a profiled program's output can hold NCCL lines). Adding a
kind is one folder under ``analysis/readers/`` and one class and one line here (docs/contributing.md).
Imports of the readers and the layers above them stay inside the methods: detection needs none of them.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from analysis.errors import TraceError
from analysis.readers import AnalysisStep, Probe, Reader, ReaderRegistry, ToolKind
from analysis.report_types import ReportInfo

SQLITE_MAGIC = b"SQLite format 3\x00"
NCU_REP_MAGIC = b"NVR\x00"
TEXT_LOOKAHEAD = 1 << 20  # text inputs may open with pages of the program's own output before the tool's lines

Progress = Callable[[str, int, int], None]


def _text_head(probe: Probe) -> bytes | None:
    """Up to ``TEXT_LOOKAHEAD`` bytes of a text input longer than its head (None: all read, or binary)."""
    if probe.size > len(probe.head) and b"\x00" not in probe.head[:512]:
        return probe.more(TEXT_LOOKAHEAD)
    return None


def _check_schema(meta: Mapping[str, str]) -> None:
    from analysis.readers.schema import READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION

    if meta.get("schema_version") not in {str(v) for v in READABLE_SCHEMA_VERSIONS}:
        raise TraceError("unsupported_schema", f"written with schema version {meta.get('schema_version')}, "
                         f"this Goodput reads {SCHEMA_VERSION}: ingest the export again")


def _trace_summary(out: Path, name: str) -> ReportInfo:
    from analysis.diagnosis.summary import report_info
    from analysis.model.trace import Trace

    trace = Trace(out, name)
    try:
        return report_info(trace)
    finally:
        trace.close()



def _write_iterations(path: Path, memory_bytes: int, deadline: float) -> int:
    """``analysis.loops.steps.write_iterations``, imported once the copy is done: the loop finder imports NumPy
    and the model (0.2 s), which delayed the export's validation, and with it the ingest child's plan."""
    from analysis.loops.steps import write_iterations

    return write_iterations(path, memory_bytes, deadline)


def _import_iterations() -> None:
    """``_write_iterations``'s imports, done while the ingest child copies (``ingest_nsys(prepare=)``)."""
    import analysis.loops.steps  # noqa: F401 - imported for the derive step that follows the copy


class NsysReader:
    """Nsight Systems: an SQLite export (``nsys export --type sqlite``), or a binary .nsys-rep converted here."""

    kind = ToolKind.NSYS
    step = AnalysisStep.REPORT
    description = "an nsys SQLite export"

    def detect(self, probe: Probe, *, converted_elsewhere: bool = False) -> bool:
        from analysis.readers.nsys.convert import REP_SUFFIXES, export_command, nsys_binary

        if probe.head.startswith(SQLITE_MAGIC):
            return True
        if probe.path.suffix in REP_SUFFIXES and not probe.head.startswith(NCU_REP_MAGIC):
            # Binary Nsight Systems report: ingest converts it when an nsys binary is installed here.
            if converted_elsewhere or nsys_binary():
                return True
            raise TraceError(
                "nsys_rep_needs_nsys",
                "this is a binary .nsys-rep report and no `nsys` is installed here; convert it with "
                f"`{export_command(probe.path.name)}` and upload the SQLite file",
            )
        return False

    def takes_child(self, src: Path) -> bool:
        """Only an SQLite export is bulk-copied by the isolated child (a .nsys-rep is converted first)."""
        with Path(src).open("rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC

    def ingest(self, src: Path, out: Path, *, limits: Any, progress: Progress | None, child: Any,
               keep: Path | None, iterations: bool = True) -> Path | None:
        from analysis.readers.nsys.convert import export_sqlite
        from analysis.readers.nsys.ingest import ingest_nsys

        if not self.takes_child(src):
            converted = out.parent / f".{out.name}.export.sqlite"
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                if progress:
                    progress("nsys export", 0, 1)
                export_sqlite(src, converted, timeout_s=limits.timeout_s)
                ingest_nsys(converted, out, limits=limits, progress=progress, keep=keep, derive=_write_iterations)
            finally:
                converted.unlink(missing_ok=True)
        else:
            ingest_nsys(src, out, limits=limits, progress=progress, child=child, keep=keep,
                        derive=_write_iterations if iterations else None, prepare=_import_iterations)
        return keep

    def summarize(self, out: Path, name: str) -> ReportInfo:
        return _trace_summary(out, name)

    def check_meta(self, meta: Mapping[str, str]) -> None:
        _check_schema(meta)


class NcuReader:
    """Nsight Compute: a CSV (``ncu --csv --page raw``), or a binary .ncu-rep where an ncu binary is installed.
    Analyzed in the run step, linked to the run's nsys kernel time."""

    kind = ToolKind.NCU
    step = AnalysisStep.RUN
    description = "an ncu CSV export"

    def detect(self, probe: Probe, *, converted_elsewhere: bool = False) -> bool:
        if probe.head.startswith(NCU_REP_MAGIC) or probe.path.suffix == ".ncu-rep":
            # Binary Nsight Compute report (magic "NVR\0"): readable only through an ncu binary.
            if shutil.which("ncu"):
                return True
            raise TraceError(
                "ncu_rep_needs_ncu",
                "this is a binary .ncu-rep report and no `ncu` is installed here; convert it with "
                "`ncu --import FILE.ncu-rep --csv --page raw > FILE.csv` and upload the CSV",
            )
        from analysis.readers.ncu.reader import looks_like_ncu_csv

        if looks_like_ncu_csv(probe.head):
            return True
        more = _text_head(probe)
        return more is not None and looks_like_ncu_csv(more)

    def takes_child(self, src: Path) -> bool:
        return False

    def ingest(self, src: Path, out: Path, *, limits: Any, progress: Progress | None, child: Any,
               keep: Path | None, iterations: bool = True) -> Path | None:
        from analysis.readers.ncu.ingest import ingest_ncu

        ingest_ncu(src, out, limits=limits, progress=progress)
        return None  # an ncu report carries no captured environment: nothing to scrub and keep

    def summarize(self, out: Path, name: str) -> ReportInfo:
        return _trace_summary(out, name)

    def check_meta(self, meta: Mapping[str, str]) -> None:
        _check_schema(meta)


class NcclReader:
    """NCCL debug logs (``NCCL_DEBUG=INFO``): the network path NCCL chose, its settings and failures.
    Analyzed in the run step, joined with the run's nsys reports by host, pid and rank."""

    kind = ToolKind.NCCL
    step = AnalysisStep.RUN
    description = "an NCCL debug log"

    def detect(self, probe: Probe, *, converted_elsewhere: bool = False) -> bool:
        from analysis.readers.nccl import looks_like_nccl_log

        if looks_like_nccl_log(probe.head):
            return True
        more = _text_head(probe)
        return more is not None and looks_like_nccl_log(more)

    def takes_child(self, src: Path) -> bool:
        return False

    def ingest(self, src: Path, out: Path, *, limits: Any, progress: Progress | None, child: Any,
               keep: Path | None, iterations: bool = True) -> Path | None:
        from analysis.readers.nccl import ingest as ingest_nccl

        ingest_nccl(src, out, progress=progress, limits=limits)
        return None  # the log is kept as uploaded: NCCL prints no environment beyond its own NCCL_* settings

    def summarize(self, out: Path, name: str) -> ReportInfo:
        from analysis.readers.nccl import load

        path = load(out).path()
        counts = {"nodes": len(path.nodes), "ranks": len(path.ranks), "nics": len(path.nics),
                  "warnings": len(path.warnings)}
        info: ReportInfo = {"file": name, "tool": ToolKind.NCCL.value, "counts": counts}
        if path.version:
            info["tool_version"] = str(path.version)
        hosts = [n.host for n in path.nodes if n.host]
        if len(hosts) == 1:  # a log of one node names the report's host; a job's log spans several
            info["host"] = str(hosts[0])
        return info

    def check_meta(self, meta: Mapping[str, str]) -> None:
        from analysis.readers.nccl.schema import NCCL_SCHEMA_VERSION

        if meta.get("schema_version") != str(NCCL_SCHEMA_VERSION):
            raise TraceError("unsupported_schema", f"an NCCL log ingested with schema version "
                             f"{meta.get('schema_version')}, this Goodput reads {NCCL_SCHEMA_VERSION}: "
                             "ingest the log again")


@functools.cache
def default_readers() -> ReaderRegistry:
    """The registry of every input kind, in detection order (built once, on first use)."""
    registry = ReaderRegistry()
    for reader in (NsysReader(), NcuReader(), NcclReader()):
        registry.register(reader)
    return registry


def reader_of(kind: str) -> Reader:
    """The reader of a stored kind ('nsys', 'ncu', 'nccl'); KeyError for another."""
    return default_readers().get(kind)


def step_of(kind: str) -> AnalysisStep:
    """Which step analyses reports of ``kind`` (an unknown kind: the run step, which skips what it cannot read)."""
    try:
        return reader_of(kind).step
    except KeyError:
        return AnalysisStep.RUN


__all__ = ["NcclReader", "NcuReader", "NsysReader", "default_readers", "reader_of", "step_of"]
