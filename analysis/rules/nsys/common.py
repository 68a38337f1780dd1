"""Helpers every nsys rule shares: the report's span, the NVTX range around a moment, name patterns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from analysis import fmt
from analysis.activity import unit_ops
from analysis.trace import Trace

HERE = Path(__file__).resolve().parent

# Host calls that block until GPU work completes (runtime and driver API; names without _vNNNN).
SYNC_API_RE = r"^cu(da)?(Device|Stream|Thread|Event|Ctx)Synchronize(_v\d+)?$"
# Memset calls; the synchronous ones are those without "Async" in the name (RE2 has no lookahead).
MEMSET_RE = r"^cu(da)?Memset"


def api_name_in(trace: Trace, pattern: str, column: str = "name") -> str:
    """SQL predicate ``column IN (...)`` over the CUDA API names matching ``pattern`` (FALSE when none).

    The regex runs once per distinct name (a handful), not once per call (tens of millions): the
    IN-list of literals is then a cheap filter DuckDB evaluates on the scan.
    """
    if not trace.has_rows("cuda_api"):
        return "FALSE"
    # Two steps, so that the optimizer cannot push the regex below the DISTINCT onto every row.
    distinct = trace.memo.get("api_names")
    if distinct is None:
        distinct = [r[0] for r in trace.sql("SELECT DISTINCT name FROM cuda_api WHERE name IS NOT NULL")]
        trace.memo["api_names"] = distinct
    names = [r[0] for r in trace.sql(
        "SELECT n FROM unnest($names::VARCHAR[]) t(n) WHERE regexp_matches(n, $re) ORDER BY n",
        {"names": distinct, "re": pattern})]
    if not names:
        return "FALSE"
    quoted = ", ".join("'" + n.replace("'", "''") + "'" for n in names)
    return f"{column} IN ({quoted})"


def load_sql(name: str) -> str:
    """The text of a ``.sql`` file beside the rules (named parameters only)."""
    return (HERE / name).read_text()


def report_span_ns(trace: Trace) -> int:
    """The report's GPU-active span: the sum of its devices' spans (the breakdown's ``span_ns``)."""
    return sum(int(u.end.max()) - int(u.start[0]) for u in unit_ops(trace) if len(u))


def pct(part: int | float, whole: int | float) -> float | None:
    """Share in percent, or None when the whole is zero."""
    return 100.0 * float(part) / float(whole) if whole else None


def nvtx_at(trace: Trace, points: Sequence[tuple[int | None, int | None]]) -> list[str | None]:
    """Innermost NVTX range (push/pop or start/end) of the process around each (pid, time), or None.

    One query for the whole bounded sample; ranges of any thread of the process count, since the
    launching thread of an idle moment is unknown.
    """
    if not points or not trace.has_rows("nvtx"):
        return [None] * len(points)
    values = ", ".join(f"({i}, {int(p) if p is not None else 'NULL'}, {int(t) if t is not None else 'NULL'})"
                       for i, (p, t) in enumerate(points))
    rows = trace.sql(f"""
        WITH pts(i, pid, t) AS (VALUES {values})
        SELECT i, arg_max(n.text, n.start_ns) FROM pts JOIN nvtx n
          ON n.pid = pts.pid AND n.start_ns <= pts.t AND n.end_ns >= pts.t AND n.kind <> 'mark'
        GROUP BY i""")  # noqa: S608 - integers only
    found = dict(rows)
    return [found.get(i) for i in range(len(points))]


def fmt_ms(ns: int | float) -> str:
    """A duration in a finding's text (three significant digits, the unit chosen for the value)."""
    return fmt.duration(ns)
