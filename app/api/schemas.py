"""JSON Schemas of /api/v1 bodies: the single source the OpenAPI document is generated from.

The analysis' own types are not written here: their components are the result schema's ``$defs``
(``analysis.api.result_schema()``, committed as ``analysis/result.schema.json``), so a field added to
``ReportSummary``, ``Verdict`` ... reaches the API document when ``python -m app.openapi`` regenerates it."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from analysis.api import result_schema, threshold_keys, threshold_ranges
from app.models import ANALYSIS_STATUSES, REPORT_KINDS, REPORT_STATUSES, RUN_SOURCES, RUN_STATUSES, RunStatus
from app.services.jobs.ncu_summary import STORED_KERNEL_KEYS
from app.services.runs.uploads import CLUSTER_PATTERN, JOB_PATTERN, MAX_THRESHOLDS, SHA_PATTERN, TAG_PATTERN

S = dict[str, Any]


def obj(required: list[str] | None = None, /, **props: S) -> S:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required}


def nullable(schema: S) -> S:
    return {"anyOf": [schema, {"type": "null"}]}


def ref(name: str) -> S:
    return {"$ref": f"#/components/schemas/{name}"}


def page_of(item: str) -> S:
    return obj(items={"type": "array", "items": ref(item)}, page=INT, page_size=INT, total=INT)


def _as_components(node: Any) -> Any:
    """A result-schema fragment with its ``#/$defs/X`` references pointing at ``#/components/schemas/X``."""
    if isinstance(node, dict):
        return {k: (v.replace("#/$defs/", "#/components/schemas/") if k == "$ref" and isinstance(v, str)
                    else _as_components(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_as_components(v) for v in node]
    return node


_RESULT = result_schema()
# The analysis' types (ReportSummary, Verdict, RuleStatus, Evidence ...), as the result schema declares them.
RESULT_DEFS: dict[str, S] = _as_components(_RESULT["$defs"])
# The run-wide fields of an analysis result (verdict, network, collectives ...), as the result schema declares them.
RESULT_FIELDS: dict[str, S] = _as_components(_RESULT["properties"])


def _stored_summary() -> dict[str, S]:
    """A report summary as the metadata DB keeps it: ``ReportSummary`` whose ncu kernels carry what
    ``app.services.jobs.ncu_summary.compact_report`` adds (``STORED_KERNEL_KEYS``)."""
    kernel = copy.deepcopy(RESULT_DEFS["NcuKernel"])
    kernel["properties"] |= STORED_KERNEL_KEYS
    summary = copy.deepcopy(RESULT_DEFS["ReportSummary"])
    summary["properties"]["kernels"] = {"anyOf": [{"type": "array", "items": ref("StoredNcuKernel")},
                                                  {"type": "null"}]}
    return {"StoredNcuKernel": kernel, "StoredReportSummary": summary}


INT: S = {"type": "integer"}
NUM: S = {"type": "number"}
STR: S = {"type": "string"}
TIME: S = {"type": "string", "format": "date-time"}
ANY_OBJ: S = {"type": "object"}
NS: S = nullable(INT)

BREAKDOWN = {k: NS for k in ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns")}
DELTA = obj(base=nullable(NUM), head=nullable(NUM), delta=nullable(NUM), delta_pct=nullable(NUM))
SAMPLE = obj(n=INT, median=nullable(NUM), p10=nullable(NUM), p90=nullable(NUM))
# A metric's two samples and the test (analysis.views.significance.compare_samples).
TESTED = obj(base=SAMPLE, head=SAMPLE, delta=nullable(NUM), delta_pct=nullable(NUM), p_value=nullable(NUM),
             test={"anyOf": [{"type": "string", "enum": ["mann_whitney", "floor_only"]}, {"type": "null"}]},
             significant=nullable({"type": "boolean"}), changed={"type": "boolean"}, note=nullable(STR))
KERNEL_DIFF = obj(name=STR, label=STR, status={"type": "string", "enum": ["changed", "new", "gone", "unchanged"]},
                  base_count=INT, head_count=INT, base_total_ns=INT, head_total_ns=INT,
                  launches_per_step=nullable(obj(base=NUM, head=NUM)), per_launch_ns=TESTED, moved_ns=NUM)
WINDOWS = {"type": "array", "items": nullable({"type": "array", "items": INT, "minItems": 2, "maxItems": 2})}
HEADLINE = {**BREAKDOWN, "goodput_pct": nullable(NUM), "finding_count": NS, "top_impact_ns": NS}

# The pattern covers specs the server accepts whatever their values; other iterations:A-B (A <= B) and
# time:T0-T1 (T0 < T1 <= 2^63-1 ns, units ns|us|ms|s) are accepted too, their order checked by the server.
_UNIT = "(ns|us|ms|s)?"
WINDOW_SCHEMA = {"type": "string", "pattern": "^(steady|all|startup|nvtx:[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]{0,194}"
                 # The subset of iterations:A-B and time:T0-T1 whose order and int64 bound a pattern can say.
                 f"|iterations:0-[0-9]{{1,12}}|time:0{_UNIT}-[1-9][0-9]{{0,8}}{_UNIT})$",
                 "description": "analysis window: steady (default), all, startup, nvtx:NAME, iterations:A-B, "
                                "time:T0-T1"}

# Threshold overrides: the rule catalogue's RULE.name keys (the server checks them against the same catalogue).
THRESHOLD_KEYS = threshold_keys()


def _threshold_value(declared: Mapping[str, Any]) -> S:
    """A threshold's value as the server takes it: its type and range, or one of its special values."""
    ranged = {"type": declared["type"], "minimum": declared["minimum"], "maximum": declared["maximum"]}
    return {"anyOf": [ranged, {"enum": declared["special"]}]} if declared["special"] else ranged


THRESHOLD_VALUES = {k: _threshold_value(d) for k, d in threshold_ranges().items()}


def _number_pattern(declared: Mapping[str, Any]) -> str:
    """Decimal text the server takes for a threshold: a subset of its range a pattern can say (below the
    largest power of ten within the maximum, the maximum itself when it is one; at least 1 when the minimum
    is above 0), whole numbers for integer thresholds, and its special values."""
    lo, hi = declared["minimum"], declared["maximum"]
    digits = len(str(int(hi))) - 1  # 10**digits <= hi
    if lo <= 0:
        whole = "0" if digits == 0 else f"[0-9]{{1,{digits}}}"
    else:
        whole = f"[1-9][0-9]{{0,{max(digits - 1, 0)}}}"
    text = whole if declared["type"] == "integer" else whole + r"(\.[0-9]{1,6})?"
    exact = [f"{v:.0f}" for v in (hi, *declared["special"]) if float(v).is_integer() and f"{v:.0f}".isdigit()]
    return "(" + "|".join([text, *exact]) + ")"


THRESHOLD_ITEM = {"type": "string",
                  "pattern": "^(" + "|".join(re.escape(k) + "=" + _number_pattern(d)
                                             for k, d in threshold_ranges().items()) + ")$",
                  "description": "RULE.name=NUMBER, e.g. GPU001.min_gap_us=200, within the threshold's range "
                                 "(GET /rules lists each rule's thresholds with their ranges)"}
THRESHOLDS_LIST = {"type": "array", "items": THRESHOLD_ITEM, "maxItems": MAX_THRESHOLDS}

SCHEMAS: dict[str, S] = {
    "Error": obj(error=obj(code=STR, message=STR, details=ANY_OBJ)),
    "Health": obj(status={"type": "string", "enum": ["ok", "degraded"]}, database={"type": "boolean"},
                  broker={"type": "boolean"}),
    "Report": obj(
        id=INT, run_id=INT, name=STR, kind={"type": "string", "enum": list(REPORT_KINDS)}, rank=NS,
        host=nullable(STR), sha256=STR, size_bytes=INT,
        status={"type": "string", "enum": list(REPORT_STATUSES)},
        error=nullable(obj(code=STR, message=STR)), attempts=INT, lease_owner=nullable(STR),
        lease_expires_at=nullable(TIME),
        progress=ANY_OBJ, counts=ANY_OBJ, tool_version=nullable(STR), created_at=TIME, updated_at=TIME,
    ),
    "Run": obj(
        id=INT, job=STR, tags={"type": "object", "additionalProperties": STR}, git_sha=nullable(STR),
        cluster=nullable(STR), submitter=nullable(STR), source={"type": "string", "enum": list(RUN_SOURCES)},
        status={"type": "string", "enum": list(RUN_STATUSES)},
        analysis_status=nullable({"type": "string", "enum": list(ANALYSIS_STATUSES)}),
        analysis_window=STR, analyzed_at=nullable(TIME), error=nullable(STR), created_at=TIME,
        goodput_pct=nullable(NUM), finding_count=NS, top_impact_ns=NS,
    ),
    "Finding": obj(
        id=INT, run_id=INT, report_id=NS, position=INT, rule_id=STR,
        severity={"type": "string", "enum": ["critical", "warning", "info"]}, title=STR, message=STR,
        impact_ns=INT, impact_pct=nullable(NUM), advice=STR, evidence={"type": "array", "items": ref("Evidence")},
        evidence_total=INT, report=nullable(STR), rank=NS, extra=ANY_OBJ,
    ),
    "Summary": obj(
        run_id=INT, status=STR, analysis_status=nullable(STR), analyzed_at=nullable(TIME),
        totals=nullable(obj(**HEADLINE)),
        reports={"type": "array", "items": obj(report_id=INT, data=ref("StoredReportSummary"), **HEADLINE)},
        severity_counts=obj(critical=INT, warning=INT, info=INT),
        rules={"type": "array", "items": ref("RuleStatus")},
        # Issue #16: a run analyzed without some reports (they failed) names them, and the ranks missing.
        missing_reports={"type": "array", "items": obj(report_id=INT, report=STR, rank=NS,
                                                        error_code=nullable(STR), error_message=nullable(STR))},
        missing_ranks={"type": "array", "items": INT},
        # The run-wide fields of the analysis result, null before analysis or when the run has none: what
        # bounds the run and what to do first (verdict), NCCL's network matrix, the collectives' wait vs transfer,
        # the NCCL debug log's path (issue #44).
        **{key: RESULT_FIELDS[key] for key in ("verdict", "network", "collectives", "network_path")},
        # What is missing or does not belong among the run's reports (analysis.run.mixed): code, message,
        # reports, ranks; empty when they fit together.
        run_warnings={"type": "array", "items": RESULT_FIELDS["run_warnings"]["anyOf"][0]["items"]},
    ),
    "Job": obj(id=INT, name=STR, created_at=TIME, run_count=INT, last_run_at=nullable(TIME)),
    "JobHistory": obj(job=STR, items={"type": "array", "items": obj(
        run_id=INT, created_at=TIME, status=STR, git_sha=nullable(STR), tags=ANY_OBJ, **HEADLINE)}),
    "Compare": obj(
        base=INT, head=INT,
        basis={"type": "string", "enum": ["per_step", "per_launch_and_totals"]},
        notes={"type": "array", "items": STR},
        windows=obj(base=WINDOWS, head=WINDOWS),
        kpis={"type": "object", "additionalProperties": DELTA},
        breakdown={"type": "object", "additionalProperties": DELTA},
        step_time_ns=DELTA,
        steps=nullable({"type": "object", "description": "per-step metric -> TESTED (count: DELTA; source: "
                                                          "where the records came from)"}),
        noise=obj(pct=NUM, abs_ns=NUM, per={"type": "string", "enum": ["step", "run"]}, kernels_below_noise=INT,
                  kernels_compared=INT),
        kernels={"type": "array", "items": KERNEL_DIFF},
        kernel_table={"type": "array", "items": KERNEL_DIFF},
        matched_findings={"type": "array", "items": obj(
            rule_id=STR, rank=NS, device=NS, phase=nullable(STR), kernel=nullable(STR), title=STR,
            base_title=STR, severity=obj(base=STR, head=STR, changed={"type": "boolean"}),
            impact_ns=DELTA, impact_per_step_ns=DELTA, matched_on=STR)},
        new_findings={"type": "array", "items": ref("Finding")},
        resolved_findings={"type": "array", "items": ref("Finding")},
        ranks={"type": "array", "items": obj(
            rank=NS, report=NS, base_file=nullable(STR), head_file=nullable(STR),
            breakdown={"type": "object", "additionalProperties": DELTA},
            steps=nullable({"type": "object", "additionalProperties": DELTA}),
            per_step=nullable(ANY_OBJ))},
    ),
    "Rule": obj(["id", "name", "category", "tool", "doc", "thresholds"], id=STR, name=STR, category=STR,
                tool=STR, summary=STR, doc=STR, requires={"type": "array", "items": STR},
                thresholds={"type": "object", "additionalProperties": obj(
                    default=NUM, unit=STR, help=STR, type={"type": "string", "enum": ["integer", "number"]},
                    minimum=NUM, maximum=NUM, special={"type": "array", "items": NUM}, range=STR)}),
    "Deleted": obj(id=INT, status={"type": "string", "enum": [RunStatus.DELETED.value]}),
    # The server's own validation patterns (app.services.runs.uploads), so the two cannot disagree.
    "RunMetadata": obj(
        [], job={"type": "string", "pattern": JOB_PATTERN},
        tags={"type": "array", "items": {"type": "string", "pattern": TAG_PATTERN}, "maxItems": 50},
        git_sha={"type": "string", "pattern": SHA_PATTERN}, cluster={"type": "string", "pattern": CLUSTER_PATTERN},
        source={"type": "string", "enum": list(RUN_SOURCES)},
        window=WINDOW_SCHEMA,
        thresholds={"anyOf": [THRESHOLDS_LIST, {"type": "object", "maxProperties": MAX_THRESHOLDS,
                                                "properties": THRESHOLD_VALUES,
                                                "additionalProperties": False}],
                    "description": "threshold overrides for every analysis of the run, recorded as its tag "
                                   "goodput.thresholds"},
    ),
    "Token": obj(id=INT, name=STR, scope={"type": "string", "enum": ["read", "write", "admin"]}, prefix=STR,
                 owner=nullable(STR), created_at=TIME, last_used_at=nullable(TIME), revoked_at=nullable(TIME)),
    "Reanalysis": obj(["window"], window=WINDOW_SCHEMA),
}
SCHEMAS["RunDetail"] = {"allOf": [ref("Run"), obj(reports={"type": "array", "items": ref("Report")},
                                                  rules={"type": "array", "items": ref("RuleStatus")},
                                                  rule_errors={"type": "array", "items": obj(id=STR, reason=STR)},
                                                  analysis_attempts=INT, analysis_lease_owner=nullable(STR),
                                                  analysis_lease_expires_at=nullable(TIME),
                                                  # what the poll says once the run is analyzed (analysis.run.mixed):
                                                  # missing ranks, other jobs or clocks, ranks sharing a CPU; empty before
                                                  run_warnings={"type": "array", "items": ANY_OBJ})]}
SCHEMAS["RunList"] = page_of("Run")
SCHEMAS["FindingList"] = page_of("Finding")
SCHEMAS["JobList"] = page_of("Job")
SCHEMAS["RuleList"] = obj(items={"type": "array", "items": ref("Rule")})
SCHEMAS["TokenList"] = obj(items={"type": "array", "items": ref("Token")})
SCHEMAS["OpenAPI"] = ANY_OBJ
for _name, _schema in {**RESULT_DEFS, **_stored_summary()}.items():
    if _name in SCHEMAS:  # an analysis type named like an API body would silently replace it
        raise RuntimeError(f"the result schema's {_name} clashes with the API's own schema of that name")
    SCHEMAS[_name] = _schema
