"""Helpers every nsys rule shares: the report's span, the NVTX range around a moment, name patterns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from analysis import fmt
from analysis.model.activity import unit_ops
from analysis.model.cuda_api import MEMSET_RE, SYNC_API_RE, api_name_in
from analysis.model.trace import Trace

HERE = Path(__file__).resolve().parent

# The CUDA API name patterns live below the rules (phases and launches use them too); re-exported for the rules.
__all__ = ["MEMSET_RE", "SYNC_API_RE", "api_name_in"]


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
