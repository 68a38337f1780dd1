"""CUDA API call names: the patterns that classify calls, and the SQL predicate that selects them cheaply."""

from __future__ import annotations

from analysis.model.trace import Trace

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
    # Several rules ask for the same pattern on one trace: its names are remembered while the trace is open.
    key = ("api_name_in", pattern)
    names = trace.memo.get(key)
    if names is None:
        names = [r[0] for r in trace.sql(
            "SELECT n FROM unnest($names::VARCHAR[]) t(n) WHERE regexp_matches(n, $re) ORDER BY n",
            {"names": distinct, "re": pattern})]
        trace.memo[key] = names
    if not names:
        return "FALSE"
    quoted = ", ".join("'" + n.replace("'", "''") + "'" for n in names)
    return f"{column} IN ({quoted})"
