"""The library's facade: detect an export's kind, ingest it into DuckDB, analyze a run of reports.

The CLI, the Celery tasks and the tests call these; nothing else in ``analysis`` needs to be known.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The comparison's plain-data helpers (stdlib only until a DuckDB file is read).
from analysis.compare import DEFAULT_NOISE_PCT, RunFacts, kernel_totals, merge_kernels, run_totals
from analysis.errors import TraceError
from analysis.nsys.convert import REP_SUFFIXES, export_command, export_sqlite, nsys_binary

__all__ = ["DEFAULT_NOISE_PCT", "Limits", "RunFacts", "TraceError", "analyze", "check_thresholds", "compare_facts", "detect_kind",
           "ingest", "kernel_totals", "merge_kernels", "run_totals", "start_ingest_child"]

SQLITE_MAGIC = b"SQLite format 3\x00"
Progress = Callable[[str, int, int], None]  # (stage or table, done, total)


@dataclass(frozen=True)
class Limits:
    """Resource limits for reading one untrusted export."""

    max_bytes: int = 20 * 1024**3
    timeout_s: float = 3600.0
    memory_bytes: int = 2 * 1024**3      # address-space cap of the child process doing the bulk copy
    threads: int = 2


def detect_kind(path: Path) -> str:
    """'nsys' for an SQLite file, 'ncu' for CSV text, else a TraceError naming what it is."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise TraceError("unknown_format", f"cannot read the file: {exc.strerror}") from None
    if size == 0:
        raise TraceError("empty_file", "the file is empty (0 bytes); export the report again")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(b"NVR\x00") or path.suffix == ".ncu-rep":
        # Binary Nsight Compute report (magic "NVR\0"): readable only through an ncu binary.
        import shutil

        if shutil.which("ncu"):
            return "ncu"
        raise TraceError(
            "ncu_rep_needs_ncu",
            "this is a binary .ncu-rep report and no `ncu` is installed here; convert it with "
            "`ncu --import FILE.ncu-rep --csv --page raw > FILE.csv` and upload the CSV",
        )
    if path.suffix in REP_SUFFIXES:
        # Binary Nsight Systems report: ingest converts it when an nsys binary is installed here.
        if nsys_binary():
            return "nsys"
        raise TraceError(
            "nsys_rep_needs_nsys",
            "this is a binary .nsys-rep report and no `nsys` is installed here; convert it with "
            f"`{export_command(path.name)}` and upload the SQLite file",
        )
    from analysis.ncu.reader import looks_like_ncu_csv

    if looks_like_ncu_csv(head):
        return "ncu"
    if size > len(head) and b"\x00" not in head[:512]:
        # ncu CSVs can start with pages of the profiled program's own output before ncu's first line.
        with path.open("rb") as fh:
            if looks_like_ncu_csv(fh.read(1 << 20)):
                return "ncu"
    if _is_binary(head):
        raise TraceError("not_sqlite", "the file is binary but not an SQLite database (nor CSV text); "
                         "upload the .sqlite file written by `nsys export --type sqlite`")
    raise TraceError("unknown_format", "the file is neither an nsys SQLite export nor an ncu CSV export")


def _starts_with(path: Path, magic: bytes) -> bool:
    with path.open("rb") as fh:
        return fh.read(len(magic)) == magic


def _is_binary(head: bytes) -> bool:
    """True for data that is not text: NUL or other control bytes, or bytes that are not UTF-8."""
    if any(b < 0x20 and b not in b"\t\n\r\f" for b in head[:1024]):
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a multi-byte character cut by the 4 KiB read is still text
    return False


@dataclass
class IngestResult:
    """What ingest wrote: the tool and the report's headline facts (see ``analysis.summary``)."""

    tool: str
    out: Path
    info: dict[str, Any] = field(default_factory=dict)
    kept: Path | None = None  # the export without its captured environment, when ``keep`` was asked for


def start_ingest_child(out: Path, limits: Limits | None = None) -> Any:
    """Start the isolated bulk-copy process for ``out`` ahead of ``ingest(..., child=)``, so its start-up
    overlaps the caller's own work; it sees no export before that export passed validation."""
    from analysis.nsys.ingest import start_child

    return start_child(Path(out), limits or Limits())


def is_normalized_report(path: Path) -> bool:
    """True for a DuckDB file (what ``ingest`` writes): ``analyze`` reads it without ingesting again."""
    try:
        with Path(path).open("rb") as fh:
            return fh.read(12)[8:12] == b"DUCK"
    except OSError:
        return False


def check_normalized_report(path: Path) -> str:
    """The tool ('nsys'/'ncu') of a DuckDB file written by this version's ``ingest``; else a TraceError."""
    import duckdb

    from analysis.schema import SCHEMA_VERSION

    try:
        con = duckdb.connect(str(path), read_only=True)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        finally:
            con.close()
    except duckdb.Error:
        raise TraceError("unknown_format", "a DuckDB file, but not one written by `goodput ingest`") from None
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        raise TraceError("unsupported_schema", f"written with schema version {meta.get('schema_version')}, "
                         f"this Goodput reads {SCHEMA_VERSION}: ingest the export again")
    return str(meta.get("tool") or "nsys")


def ingest(src: Path, out: Path, *, limits: Limits | None = None, progress: Progress | None = None,
           child: Any = None, summarize: bool = True, keep: Path | None = None) -> IngestResult:
    """Validate an untrusted export and write its normalized DuckDB file to ``out`` atomically.

    ``keep``: where to write an nsys export (a converted .nsys-rep too) as SQLite without the profiled
    job's captured environment, for re-ingest later; ncu reports carry none and are not copied.

    ``child``: from ``start_ingest_child(out, limits)``; ``summarize=False`` skips reading the headline
    facts back (``info`` is then empty), for callers that analyze the file next anyway.
    Raises ``TraceError``; on any error nothing is left at ``out``.
    """
    limits = limits or Limits()
    src, out = Path(src), Path(out)
    try:
        if src.stat().st_size > limits.max_bytes:
            raise TraceError("too_large", f"the file is {src.stat().st_size} bytes; the limit is {limits.max_bytes}")
        kind = detect_kind(src)
    except BaseException:
        if child is not None:
            child.discard()
        raise
    if child is not None and (kind != "nsys" or not _starts_with(src, SQLITE_MAGIC)):
        child.discard()  # only an SQLite nsys export is copied by the child
        child = None
    if kind == "nsys":
        from analysis.nsys.ingest import ingest_nsys

        if src.suffix in REP_SUFFIXES and not _starts_with(src, SQLITE_MAGIC):
            converted = out.parent / f".{out.name}.export.sqlite"
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                if progress:
                    progress("nsys export", 0, 1)
                export_sqlite(src, converted, timeout_s=limits.timeout_s)
                ingest_nsys(converted, out, limits=limits, progress=progress, keep=keep)
            finally:
                converted.unlink(missing_ok=True)
        else:
            ingest_nsys(src, out, limits=limits, progress=progress, child=child, keep=keep)
    else:
        from analysis.ncu.ingest import ingest_ncu

        ingest_ncu(src, out, limits=limits, progress=progress)
    kept = keep if kind == "nsys" and keep is not None else None
    if not summarize:
        return IngestResult(kind, out, {}, kept)
    from analysis.summary import report_info
    from analysis.trace import Trace

    trace = Trace(out, src.name)
    try:
        info = report_info(trace)
    finally:
        trace.close()
    return IngestResult(kind, out, info, kept)


def window_parse(spec: str | None) -> Any:
    """Check a window spec (``analysis.window``) before any work: raises ``TraceError('bad_window')``."""
    from analysis.window import parse

    return parse(spec)


def check_thresholds(thresholds: Mapping[str, float] | None) -> None:
    """Check threshold overrides (``RULE.name`` -> value) against the rule catalogue before any work, as
    ``analyze`` does: raises ``KeyError`` naming the unknown rule or threshold."""
    from analysis.rules.registry import default_registry

    default_registry().validate_overrides(thresholds)


def analyze(
    reports: list[Path], *, labels: list[str] | None = None, rules: list[str] | None = None,
    thresholds: Mapping[str, float] | None = None, top: int | None = None, memory_bytes: int | None = None,
    window: str | None = None,
) -> dict[str, Any]:
    """Analyze ingested reports (DuckDB files) as one run: report summaries, ranked findings, rule status.

    ``memory_bytes``: DuckDB's memory limit per report (default ``analysis.trace.DUCKDB_MEMORY_BYTES``);
    the NumPy arrays of the gap analysis come on top. ``window``: the part of each report the rules and
    headline numbers look at (``analysis.window``; default ``steady``; a bad spec raises
    ``TraceError('bad_window')``). Returns the JSON contract ``{"window", "reports": [...] (each with its
    ``phases`` and ``window``), "findings": [...] (each with its ``phase``), "rules": [...]}``.
    """
    from analysis.runner import analyze_run
    from analysis.trace import DUCKDB_MEMORY_BYTES

    return analyze_run(reports, labels=labels, rules=rules, thresholds=thresholds, top=top,
                       memory_bytes=memory_bytes or DUCKDB_MEMORY_BYTES, window=window)


def compare_facts(base: Any, head: Any, *, noise_pct: float | None = None) -> dict[str, Any]:
    """Two runs' difference head − base from their ``RunFacts`` (see ``analysis.compare``)."""
    from analysis.compare import compare

    return compare(base, head, noise_pct=DEFAULT_NOISE_PCT if noise_pct is None else noise_pct)
