"""The library's facade: detect an export's kind, ingest it into DuckDB, analyze a run of reports, and
read an ingested report back (timeline windows, tables, Chrome trace, the run timeline, rule catalogue).

The only door into the library for ``app`` and ``workers`` (an import-linter contract in pyproject.toml;
``analysis.errors`` is the other module they may import); the CLI uses it too. Analyses are returned
as the dataclasses of ``analysis.results``.

Imports of the heavy parts (DuckDB, NumPy, the rules, the ncu reader) stay inside the functions that need
them: the CLI imports this module before it starts the ingest child, and ``goodput --help``
imports no DuckDB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The comparison's plain-data helpers (stdlib only until a DuckDB file is read).
from analysis import fmt
from analysis.contract import SCHEMA_VERSION as RESULT_SCHEMA_VERSION
from analysis.contract import Schema, json_schema, schema_text
from analysis.diagnosis.idle_classes import CATEGORIES as IDLE_CATEGORIES
from analysis.errors import TraceError
from analysis.limits import Limits, Progress
from analysis.network_path import Pair, RunNetworkPath
from analysis.readers import AnalysisStep, Probe, ToolKind
from analysis.readers.nsys.ingest import start_child
from analysis.report_types import CollectiveSplit, FindingJson, ReportInfo
from analysis.result_parts import IdleAnatomy, KernelCause, NcuKernel
from analysis.results import (
    AnalysisResult,
    Breakdown,
    DeviceBreakdown,
    Evidence,
    FindingResult,
    ReportSummary,
    ReportWindow,
    RuleStatus,
    Verdict,
)
from analysis.views.compare import DEFAULT_NOISE_PCT, RunComparison, RunFacts, Totals
from analysis.views.payloads import Group, KernelInstances, NamedCalls, RunWindow, Selection, Window

if TYPE_CHECKING:
    from collections.abc import Iterator

    from analysis.diagnosis.rules.base import RuleInfo, ThresholdInfo
    from analysis.loops.window import WindowSpec
    from analysis.model.tables import RankMatrix, ReportTables
    from analysis.model.trace import Trace
    from analysis.readers.nsys.spawn import IngestChild
    from analysis.views.run_timeline import Part

__all__ = ["DEFAULT_NOISE_PCT", "AnalysisResult", "Group", "KernelInstances", "NamedCalls", "RunWindow", "Selection", "Window", "Breakdown", "DeviceBreakdown", "Evidence",
           "FindingResult", "Limits", "Progress", "ReportSummary", "ReportWindow", "RuleStatus", "RunComparison", "RunFacts",
           "AnalysisStep", "ToolKind", "TraceError", "analyze", "breakdown_value", "build_overview", "check_thresholds", "chrome_trace_json",
           "compare_facts", "run_facts", "run_step_time", "describe_rule", "detect_kind", "group_label", "ingest", "kernel_instances", "named_calls",
           "NCU_TREND_KPIS", "kernel_rank_matrix", "lanes_described", "ncu_kernel_kpis", "open_report",
           "overview_path", "prepare_overview", "report_tables", "rule_catalogue",
           "report_step", "run_chrome_trace_json", "run_part", "run_timeline_select", "run_timeline_window",
           "link_status", "short_host", "short_kernel_name", "start_ingest_child", "table_limit", "threshold_keys", "threshold_ranges",
           "timeline_window", "window_check", "window_parse", "fmt", "RESULT_SCHEMA_VERSION", "result_schema",
           "result_schema_text", "IDLE_CATEGORIES", "IdleAnatomy", "KernelCause", "NcuKernel", "Pair", "RunNetworkPath", "Verdict"]

SQLITE_MAGIC = b"SQLite format 3\x00"


def detect_kind(path: Path, *, converted_elsewhere: bool = False) -> ToolKind:
    """The kind of an input (``ToolKind``: the first registered reader that recognises it), else a
    TraceError naming what it is.

    ``converted_elsewhere``: a binary .nsys-rep is 'nsys' even without an nsys binary here (the web process
    accepts it; the worker that ingests it converts it, or fails it with ``nsys_rep_needs_nsys``)."""
    from analysis.input_kinds import default_readers

    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise TraceError("unknown_format", f"cannot read the file: {exc.strerror}") from None
    if size == 0:
        raise TraceError("empty_file", "the file is empty (0 bytes); export the report again")
    reader = default_readers().detect(Probe(path, size, head), converted_elsewhere=converted_elsewhere)
    if reader is not None:
        return reader.kind
    if _is_binary(head):
        raise TraceError("not_sqlite", "the file is binary but not an SQLite database (nor CSV text); "
                         "upload the .sqlite file written by `nsys export --type sqlite`")
    raise TraceError("unknown_format", "the file is neither an nsys SQLite export, an ncu CSV export nor an "
                     "NCCL debug log (NCCL_DEBUG=INFO)")


def report_step(kind: str) -> AnalysisStep:
    """Which step analyses a report of ``kind``: ``report`` (its own task right after ingest) or ``run``
    (inside the run-level step)."""
    from analysis.input_kinds import step_of

    return step_of(kind)


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
    """What ingest wrote: the tool and the report's headline facts (see ``analysis.diagnosis.summary``)."""

    tool: str
    out: Path
    info: ReportInfo | None = None  # None: ingest was told not to read them back (``summarize=False``)
    kept: Path | None = None  # the export without its captured environment, when ``keep`` was asked for


def start_ingest_child(out: Path, limits: Limits | None = None) -> IngestChild:
    """Start the isolated bulk-copy process for ``out`` ahead of ``ingest(..., child=)``, so its start-up
    overlaps the caller's own work; it sees no export before that export passed validation."""
    return start_child(Path(out), limits or Limits())


def is_normalized_report(path: Path) -> bool:
    """True for a DuckDB file (what ``ingest`` writes): ``analyze`` reads it without ingesting again."""
    try:
        with Path(path).open("rb") as fh:
            return fh.read(12)[8:12] == b"DUCK"
    except OSError:
        return False


def check_normalized_report(path: Path) -> ToolKind:
    """The tool (a ``ToolKind``) of a DuckDB file written by this version's ``ingest``; else a TraceError."""
    import duckdb

    from analysis.duck import connect
    from analysis.input_kinds import reader_of

    try:
        con = connect(path, read_only=True)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        finally:
            con.close()
    except duckdb.Error:
        raise TraceError("unknown_format", "a DuckDB file, but not one written by `goodput ingest`") from None
    tool = str(meta.get("tool") or meta.get("kind") or ToolKind.NSYS.value)
    try:
        reader = reader_of(tool)
    except KeyError:
        raise TraceError("unknown_format", f"a DuckDB file of an input kind this Goodput does not read ({tool[:40]})") from None
    reader.check_meta(meta)
    return reader.kind


def ingest(src: Path, out: Path, *, limits: Limits | None = None, progress: Progress | None = None,
           child: Any = None, summarize: bool = True, keep: Path | None = None,
           iterations: bool = True) -> IngestResult:
    """Validate an untrusted export and write its normalized DuckDB file to ``out`` atomically.

    ``keep``: where to write an nsys export (a converted .nsys-rep too) as SQLite without the profiled
    job's captured environment, for re-ingest later; ncu reports carry none and are not copied.

    ``child``: from ``start_ingest_child(out, limits)``; ``summarize=False`` skips reading the headline
    facts back (``info`` is then None), for callers that analyze the file next anyway.
    ``iterations=False``: the loop's iterations are not written into the file (``analysis.loops.steps``), for a
    file analyzed once: the analysis finds the same loop and records itself, as for a file that predates them.
    Raises ``TraceError``; on any error nothing is left at ``out``.
    """
    from analysis.input_kinds import reader_of

    limits = limits or Limits()
    src, out = Path(src), Path(out)
    try:
        if src.stat().st_size > limits.max_bytes:
            raise TraceError("too_large", f"the file is {fmt.count(src.stat().st_size)} bytes; the limit is {fmt.count(limits.max_bytes)}")
        kind = detect_kind(src)
    except BaseException:
        if child is not None:
            child.discard()
        raise
    reader = reader_of(kind)
    if child is not None and not reader.takes_child(src):
        child.discard()  # only an SQLite nsys export is copied by the child
        child = None
    kept = reader.ingest(src, out, limits=limits, progress=progress, child=child, keep=keep, iterations=iterations)
    if not summarize:
        return IngestResult(kind, out, None, kept)
    return IngestResult(kind, out, reader.summarize(out, src.name), kept)


def window_parse(spec: str | None) -> WindowSpec:
    """Check a window spec (``analysis.loops.window``) before any work: raises ``TraceError('bad_window')``."""
    from analysis.loops.window import parse

    return parse(spec)


def window_check(spec: str | None, reports: list[tuple[Path, str]]) -> None:
    """Check a window spec against ingested nsys reports (DuckDB file, label) before queuing their analysis:
    raises ``TraceError('bad_window')`` for a bad spec or an NVTX name a report does not hold."""
    from analysis.loops.window import check_fits, parse
    from analysis.model.trace import Trace

    parsed = parse(spec)
    for path, label in reports:
        trace = Trace(Path(path), label)
        try:
            check_fits(parsed, trace)
        finally:
            trace.close()


def result_schema() -> Schema:
    """The JSON Schema of an analysis result (``analysis.contract``), each rule's findings typed by its
    ``extra_type``."""
    from analysis.diagnosis.rules.registry import finding_extras

    return json_schema(finding_extras())


def result_schema_text() -> str:
    """``result_schema()`` as committed in ``analysis/result.schema.json``."""
    from analysis.diagnosis.rules.registry import finding_extras

    return schema_text(finding_extras())


def threshold_keys() -> list[str]:
    """Every rule threshold's override key, ``RULE.name``, in catalogue order."""
    from analysis.diagnosis.rules.registry import default_registry

    return [f"{r.id}.{name}" for r in default_registry() for name in r.thresholds]


def threshold_ranges() -> dict[str, ThresholdInfo]:
    """Every threshold's override key with its declaration: default, unit, help, type (``integer`` or
    ``number``), minimum, maximum and special values (outside the range, with a meaning of their own)."""
    from analysis.diagnosis.rules.registry import default_registry

    return {f"{r.id}.{name}": t.describe() for r in default_registry() for name, t in r.thresholds.items()}


def check_thresholds(thresholds: Mapping[str, Any] | None) -> dict[str, float]:
    """Check threshold overrides (``RULE.name`` -> a number or its text) against the rule catalogue before any
    work, as ``analyze`` does, and return them as numbers: raises ``analysis.diagnosis.rules.base.ThresholdError`` (a
    KeyError) naming the unknown rule or threshold, or the one out of its type and range."""
    from analysis.diagnosis.rules.registry import default_registry
    from analysis.run.nccl_step import check_net_overrides, split_overrides

    core, net = split_overrides(thresholds)  # NCCL logs' NET rules keep their own registry
    return {**default_registry().validate_overrides(core), **check_net_overrides(net)}


def analyze(
    reports: list[Path], *, labels: list[str] | None = None, rules: list[str] | None = None,
    thresholds: Mapping[str, float] | None = None, top: int | None = None, memory_bytes: int | None = None,
    window: str | None = None, by_rule: bool = True,
) -> AnalysisResult:
    """Analyze ingested reports (DuckDB files) as one run: report summaries, ranked findings, rule status.

    ``memory_bytes``: DuckDB's memory limit per report (default ``analysis.model.trace.DUCKDB_MEMORY_BYTES``);
    the NumPy arrays of the gap analysis come on top. ``window``: the part of each report the rules and
    headline numbers look at (``analysis.loops.window``; default ``steady``; a bad spec raises
    ``TraceError('bad_window')``). Returns an ``analysis.results.AnalysisResult``; its ``to_json()`` is
    the JSON contract ``{"verdict" (analysis.diagnosis.verdict; absent without nsys reports), "window", "reports": [...]
    (each with its ``phases``, ``window`` and, nsys, ``verdict``), "findings": [...] (each with its ``phase``),
    "rules": [...]}``.
    """
    from analysis.model.trace import DUCKDB_MEMORY_BYTES
    from analysis.run.runner import analyze_run

    return analyze_run(reports, labels=labels, rules=rules, thresholds=thresholds, top=top,
                       memory_bytes=memory_bytes or DUCKDB_MEMORY_BYTES, window=window, by_rule=by_rule)


def window_text(spec: str | None) -> str:
    """The canonical text of a window spec (``steady`` for None)."""
    return window_parse(spec).text


def analyze_report_into(trace: Path, label: str, folder: Path, *, window: str | None = None,
                        thresholds: Mapping[str, float] | None = None, memory_bytes: int | None = None) -> str:
    """Step 1 of a run's analysis on one ingested report (``analysis.run.runner.analyze_report``): its
    summaries, per-report findings and the compact facts the run-level step needs, saved into ``folder``.
    Returns the window spec used (its canonical text)."""
    from analysis.model.trace import DUCKDB_MEMORY_BYTES
    from analysis.run.runner import analyze_report, make_context

    ctx = make_context(window=window, thresholds=thresholds or None, memory_bytes=memory_bytes or DUCKDB_MEMORY_BYTES)
    analyze_report(Path(trace), label, ctx, Path(folder)).save(Path(folder))
    return ctx.spec.text


@dataclass(frozen=True)
class RunReport:
    """One report of a run for the run-level step: its tool, ingested trace, label, and (a kind analyzed in
    step 1, ``AnalysisStep.REPORT``: nsys) the folder its step 1 saved its analysis into."""

    tool: str
    trace: Path
    label: str
    analysis: Path | None = None


def analyze_run_step(reports: list[RunReport], *, window: str | None = None,
                     thresholds: Mapping[str, float] | None = None, memory_bytes: int | None = None,
                     missing: list[Any] | None = None) -> AnalysisResult:
    """Step 2 of a run's analysis (``analysis.run.runner.analyze_run_facts``) over the nsys reports' saved
    step-1 analyses; ncu reports are analyzed here, linked to the nsys reports' kernel facts, and the
    rules that need the whole run (``rerun_linked_rules``) run again. ``missing``: reports of the run that
    failed (named in the result with the ranks no analyzed report holds)."""
    from analysis.model.trace import DUCKDB_MEMORY_BYTES
    from analysis.run.runner import (
        ReportResult,
        analyze_run_facts,
        analyze_run_step_reports,
        make_context,
        nsys_links,
        rerun_linked_rules,
    )

    ctx = make_context(window=window, thresholds=thresholds or None, memory_bytes=memory_bytes or DUCKDB_MEMORY_BYTES)
    results: list[Any] = [None] * len(reports)
    steps = [report_step(r.tool) for r in reports]
    for i, r in enumerate(reports):
        if steps[i] is AnalysisStep.REPORT:
            if r.analysis is None:
                raise ValueError(f"report {r.label!r} has no saved analysis")
            results[i] = ReportResult.load(Path(r.analysis))
    links = nsys_links([r for r in results if r is not None])
    analyze_run_step_reports(results, [r.tool for r in reports], [Path(r.trace) for r in reports],
                             [r.label for r in reports], ctx, [None] * len(reports), links)
    rerun_linked_rules(results, [Path(r.trace) for r in reports], [r.label for r in reports], ctx)
    # As the CLI's JSON: one finding per rule and scope across the ranks, each rank's own under reports[].
    out = analyze_run_facts(results, ctx)
    if not missing:
        return out
    return replace(out, missing=tuple(missing),
                   missing_ranks=tuple(missing_ranks(out.reports)))


def missing_ranks(reports: Sequence[ReportSummary]) -> list[int]:
    """Ranks of the job no analyzed report has: ``range(world_size)`` (when the analyzed reports agree on
    it) less their ranks. A report that failed at ingest never told its rank; this names it anyway."""
    sizes = {int(w) for r in reports if isinstance(w := r.details.get("world_size"), int)}
    if len(sizes) != 1:
        return []
    (size,) = sizes
    present = {r.rank for r in reports}
    return [k for k in range(int(size)) if k not in present] if int(size) <= 100_000 else []


def run_facts(id: Any, reports: list[ReportInfo], findings: list[FindingJson], paths: Sequence[Path | None],
              totals: Totals | None = None, collectives: CollectiveSplit | None = None) -> RunFacts:
    """One side of a comparison: a run's report dicts and findings, each report's launch and step samples
    read from its DuckDB file (``paths`` aligned with ``reports``; see ``analysis.views.compare.run_facts``);
    ``collectives``: the run's waiting/transfer split (the analysis' ``collectives``), when it has one."""
    from analysis.views.compare import run_facts as facts

    return facts(id, reports, findings, paths, totals, collectives)


def run_step_time(reports: Sequence[Mapping[str, Any]]) -> float | None:
    """A run's step time from its report dicts, as the run page and the comparison define it: each report's
    median iteration length in its window, the slowest report's (None: no report found steps)."""
    from analysis.views.compare import step_time

    return step_time(reports)


def compare_facts(base: RunFacts, head: RunFacts, *, noise_pct: float | None = None) -> RunComparison:
    """Two runs' difference head − base from their ``RunFacts`` (see ``analysis.views.compare``)."""
    from analysis.views.compare import compare

    return compare(base, head, noise_pct=DEFAULT_NOISE_PCT if noise_pct is None else noise_pct)


def breakdown_value(data: Mapping[str, Any], key: str) -> int | float | None:
    """A breakdown number of a stored report (or run) summary: from its ``breakdown``, else its top level."""
    from analysis.views.compare import breakdown_value as value

    return value(data, key)


# -- Rule catalogue -------------------------------------------------------------------------------------


def _published_rules() -> list[Any]:
    """Every rule Goodput publishes: the nsys and ncu registry, then the NET rules over NCCL logs (their own
    registry, run in the run step on a log: ``analysis.run.nccl_step``)."""
    from analysis.diagnosis.nccl import registry as net_registry
    from analysis.diagnosis.rules.registry import default_registry

    return [*default_registry(), *net_registry()]


def rule_catalogue() -> list[RuleInfo]:
    """Every published rule's description (id, docs, thresholds): nsys and ncu in registry order, then NET."""
    return [rule.describe() for rule in _published_rules()]


def describe_rule(rule_id: str) -> RuleInfo | None:
    """One rule's published description, or None for an id no rule has (e.g. a rule since removed)."""
    return next((rule.describe() for rule in _published_rules() if rule.id == rule_id), None)


# -- Names ----------------------------------------------------------------------------------------------


def short_kernel_name(name: str, limit: int = 90) -> str:
    """A kernel's name without template arguments and parameter lists, for tables and labels."""
    from analysis.model.kernel_names import short_kernel_name as short

    return short(name, limit)


def link_status(sender: int, receiver: int, links: set[tuple[int, int]], recorded: set[int]) -> str:
    """A network matrix cell's state: ``traffic``, ``no traffic`` (a report that would have recorded it records
    none) or ``not recorded`` (``analysis.model.network``)."""
    from analysis.model.network import link_status as status

    return status(sender, receiver, links, recorded)


def short_host(host: str | None) -> str | None:
    """A host name without its domain."""
    from analysis.views.run_timeline import short_host as short

    return short(host)


# -- One ingested report: open it, then read windows, tables and the Chrome trace from it ----------------


def open_report(path: Path, label: str) -> Trace:
    """A read-only connection to the ingested report (DuckDB file) at ``path``; close it when done."""
    from analysis.model.trace import Trace

    return Trace(Path(path), label)


def timeline_window(trace: Trace, start_ns: int | None = None, end_ns: int | None = None,
                    buckets: int = 1000) -> Window:
    """The report's lanes between ``start_ns`` and ``end_ns``, downsampled to ``buckets`` columns."""
    from analysis.views.timeline import window

    return window(trace, start_ns, end_ns, buckets)


def kernel_instances(trace: Trace, name: str, limit: int = 5) -> KernelInstances:
    """Where the kernel ``name`` ran in the report: its count and first instances."""
    from analysis.views.timeline import kernel_instances as instances

    return instances(trace, name, limit)


def named_calls(trace: Trace, names: Sequence[str], window: tuple[int, int] | None = None,
                limit: int = 20) -> NamedCalls:
    """Where the calls a finding names held the GPU idle in the report's analysis ``window`` (its evidence when
    that is totals per name): the calls with the most idle inside (``analysis.views.named_calls``)."""
    from analysis.views.named_calls import named_calls as calls

    if window is None:
        return calls(trace, names, limit)
    view = trace.windowed(*window)
    try:
        return calls(view, names, limit)
    finally:
        view.close()


def chrome_trace_json(trace: Trace, start_ns: int | None = None, end_ns: int | None = None) -> Iterator[str]:
    """The report's Chrome trace document (optionally a window of it) as text chunks."""
    from analysis.views.chrome_trace import stream_json

    return stream_json(trace, start_ns, end_ns)


def table_limit() -> int:
    """Rows of the kernel / NVTX tables (largest total time first)."""
    from analysis.model.tables import TABLE_LIMIT

    return TABLE_LIMIT


def report_tables(trace: Trace, kind: str) -> ReportTables:
    """The report's kernel table and (nsys) NVTX table: ``{"kernels": [...], "nvtx": [...]}``."""
    from analysis.model import tables

    if kind == ToolKind.NCU:
        return {"kernels": tables.ncu_kernel_table(trace), "nvtx": []}
    if kind == ToolKind.NCCL:  # a log has no kernels: its network path is on the run
        return {"kernels": [], "nvtx": []}
    return {"kernels": tables.kernel_table(trace), "nvtx": tables.nvtx_table(trace)}


def kernel_rank_matrix(traces: list[tuple[str, Trace]], top: int = 15) -> RankMatrix:
    """Kernel x rank total time for the ``top`` kernels of (rank label, nsys report) pairs."""
    from analysis.model.tables import kernel_rank_matrix as matrix

    return matrix(traces, top)


# -- A run's nsys reports on one clock: the multi-rank timeline ----------------------------------------


def run_part(trace: Trace, report_id: int, rank: int | None = None, host: str | None = None) -> Part:
    """One opened nsys report of a run, as the run timeline names it."""
    from analysis.views.run_timeline import Part

    return Part(trace, report_id, rank, host)


def lanes_described(part: Part, trace_path: Path) -> tuple[list[Group], tuple[int, int] | None]:
    """The report's lane catalogue and extent: from the lanes file the ingest wrote beside the report, else
    read from the report once and that file written (a report ingested before the file existed; a
    read-only data directory reads the report each time)."""
    from analysis.views.run_overview import lanes_path, read_lanes, write_lanes
    from analysis.views.run_timeline import catalogue
    from analysis.views.timeline import extent

    kept = read_lanes(Path(trace_path))
    if kept is None:
        try:
            described = write_lanes(part.trace, lanes_path(Path(trace_path)))
            ext = described["extent"]
            kept = described["facts"], ((ext[0], ext[1]) if ext else None)
        except OSError:
            kept = None
    return (catalogue(part, kept[0]), kept[1]) if kept is not None else (catalogue(part), extent(part.trace))


# The ncu KPIs the job page draws per kernel over the job's runs: key, label, unit.
NCU_TREND_KPIS = (("duration", "duration", "ns"), ("sm_pct", "SM throughput", "pct"),
                  ("mem_pct", "memory throughput", "pct"), ("occupancy_pct", "achieved occupancy", "pct"))


def ncu_kernel_kpis(trace_path: Path) -> dict[str, dict[str, list[float]]]:
    """kernel name -> KPI (``NCU_TREND_KPIS``) -> [sum, count] over the ncu report's profiled launches that
    have it (the metrics the ncu rules read)."""
    from analysis.diagnosis.rules.ncu.ncu003_occupancy import ACHIEVED
    from analysis.model.ncu_metrics import MEM_PCT, SM_PCT, load_launches
    from analysis.model.trace import Trace

    getters = {"duration": lambda launch: launch.duration_ns, "sm_pct": lambda launch: launch.get(SM_PCT),
               "mem_pct": lambda launch: launch.get(MEM_PCT), "occupancy_pct": lambda launch: launch.get(ACHIEVED)}
    out: dict[str, dict[str, list[float]]] = {}
    trace = Trace(Path(trace_path), Path(trace_path).name)
    try:
        if trace.has_rows("ncu_kernels"):
            for launch in load_launches(trace):
                acc = out.setdefault(launch.name or "", {})
                for kpi, get in getters.items():
                    value = get(launch)
                    if value is not None:
                        cell = acc.setdefault(kpi, [0.0, 0])
                        cell[0] += float(value)
                        cell[1] += 1
    finally:
        trace.close()
    return out


def overview_path(trace_path: Path) -> Path:
    """Where the overview (pre-binned boxes for zoomed-out windows) of the report at ``trace_path`` lives."""
    from analysis.views.run_overview import overview_path as where

    return where(Path(trace_path))


def build_overview(trace: Trace, extent: tuple[int, int], out: Path) -> Path:
    """Write the report's overview to ``out`` (published by rename)."""
    from analysis.views.run_overview import build

    return build(trace, extent, out)


def prepare_overview(trace_path: Path) -> Path | None:
    """Build the overview of the published report at ``trace_path`` unless it exists; None for no activity."""
    from analysis.views.run_overview import prepare

    return prepare(Path(trace_path))


def run_timeline_window(parts: list[Part], start_ns: int | None = None, end_ns: int | None = None,
                        buckets: int = 1000, *, catalogues: list[list[Group]] | None = None,
                        extents: list[tuple[int, int] | None] | None = None) -> RunWindow:
    """The run's groups and lanes between ``start_ns`` and ``end_ns`` of the run clock, downsampled."""
    from analysis.views.run_timeline import window

    return window(parts, start_ns, end_ns, buckets, catalogues=catalogues, extents=extents)


def run_timeline_select(parts: list[Part], report_id: int, pid: int | None, device: int | None,
                        stream: int | None, t_ns: int, tol_ns: int = 0) -> Selection:
    """The kernel at run-clock time ``t_ns`` in a GPU lane, with its launch and (NCCL) its collective."""
    from analysis.views.run_select import select

    return select(parts, report_id, pid, device, stream, t_ns, tol_ns)


def run_chrome_trace_json(parts: list[Part], start_ns: int | None = None,
                          end_ns: int | None = None) -> Iterator[str]:
    """The run's Chrome trace document (all ranks, on the run clock) as text chunks."""
    from analysis.views.run_trace import stream_run_json

    return stream_run_json(parts, start_ns, end_ns)


def group_label(rank: int | None, host: str | None, pid: int | None = None, devices: list[int] | None = None,
                many_pids: bool = False) -> str:
    """The run timeline's name for a group (a rank, its host, its process)."""
    from analysis.views.run_timeline import group_label as label

    return label(rank, host, pid, devices or [], many_pids)
