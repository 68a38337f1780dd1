"""The analysis window: which part of each report's timeline the rules and headline numbers look at.

Specs (CLI ``--window``, API ``window``): ``steady`` (the default: the steady phase, which covers every
loop of the report, and the epilogue after it; a one-shot program's work phase; the whole report when it has no GPU work), ``all``, ``startup``, ``nvtx:NAME`` (first start to last end of the NVTX ranges
named NAME, digits read as ``#`` as for steps), ``iterations:A-B`` (iterations A to B of the loop,
0-based, inclusive), ``loop:N`` (loop N of a report with several, 0-based in time order: each loop is its
own steady window) and ``time:T0-T1`` (from session start; units ns, us, ms or s, default ms).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analysis import fmt
from analysis.errors import TraceError
from analysis.loops.phases import (
    Loop,
    PhaseInfo,
    activity_bounds,
    phase_info,
    phase_of,
    report_loop,
)
from analysis.model.trace import Trace

DEFAULT = "steady"
_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?\s*$")
_ITERS = re.compile(r"^\s*(\d{1,12})\s*-\s*(\d{1,12})\s*$")
# Times end within int64 ns (a report's clock); digits beyond these never name a real time or iteration.
MAX_NS = 2**63 - 1
_MAX_DIGITS = 24
# Control characters (NUL cannot be stored in PostgreSQL) and surrogates (cannot be encoded) are never in an
# NVTX name a report holds, nor in any other spec.
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
MAX_CHARS = 200


@dataclass(frozen=True)
class WindowSpec:
    """A parsed window option; ``text`` is the canonical spec recorded with the results."""

    kind: str                  # steady | all | startup | nvtx | iterations | loop | time
    text: str
    name: str | None = None
    a: int | None = None
    b: int | None = None


def _time(value: str) -> int:
    m = _TIME.match(value)
    if not m or len(m.group(1)) > _MAX_DIGITS:
        raise ValueError(value)
    ns = float(m.group(1)) * _UNITS[m.group(2) or "ms"]
    if not ns <= MAX_NS:  # past int64 (or an infinity): no report's clock gets there
        raise ValueError(value)
    return int(round(ns))


def parse(spec: str | None) -> WindowSpec:
    """Parse a window spec; a bad one raises ``TraceError('bad_window', ...)`` saying what is accepted."""
    text = (spec or DEFAULT).strip()
    if _BAD_CHARS.search(spec or "") or len(text) > MAX_CHARS:  # as sent: strip() drops some controls
        raise TraceError("bad_window", f"window {text[:80].encode('unicode_escape').decode()!r}: at most "
                         f"{MAX_CHARS} characters, no control characters or unpaired surrogates")
    kind, _, arg = text.partition(":")
    kind = kind.strip().lower()
    try:
        if kind in ("steady", "all", "startup") and not arg:
            return WindowSpec(kind, kind)
        if kind == "nvtx" and arg.strip():
            return WindowSpec("nvtx", f"nvtx:{arg.strip()}", name=arg.strip())
        if kind == "iterations":
            m = _ITERS.match(arg)
            if m and int(m.group(1)) <= int(m.group(2)):
                return WindowSpec("iterations", f"iterations:{m.group(1)}-{m.group(2)}",
                                  a=int(m.group(1)), b=int(m.group(2)))
        if kind == "loop" and arg.strip().isdigit():
            return WindowSpec("loop", f"loop:{int(arg)}", a=int(arg))
        if kind == "time":
            left, sep, right = arg.partition("-")
            if sep:
                a, b = _time(left), _time(right)
                if a < b <= MAX_NS:
                    return WindowSpec("time", f"time:{a}ns-{b}ns", a=a, b=b)
    except ValueError:
        pass
    raise TraceError("bad_window", f"window {text[:80]!r} is not one of steady, all, startup, nvtx:NAME, "
                     "iterations:A-B (0-based, A <= B), loop:N (0-based) or time:T0-T1 (units ns, us, ms, s; default ms; T0 < T1)")


def _nvtx_bounds(trace: Trace, name: str | None) -> tuple[int | None, int | None]:
    row = trace.sql("""SELECT MIN(start_ns), MAX(end_ns) FROM nvtx WHERE kind <> 'mark'
                       AND (text = $n OR regexp_replace(text, '[0-9]+', '#', 'g') = $n)""",
                    {"n": name}) if trace.has_rows("nvtx") else [(None, None)]
    return row[0][0], row[0][1]


def _loop_fits(spec: WindowSpec, label: str, loop: Loop) -> None:
    """``loop:N`` and ``iterations:A-B`` against the report's loop(s): ``TraceError('bad_window')`` naming the
    valid range when the report does not have them."""
    if spec.kind == "loop":
        n = len(loop.all)
        if spec.a is None or spec.a >= n:
            valid = "it has no loop" if n == 0 else f"valid: loop:0 to loop:{n - 1}"
            raise TraceError("bad_window", f"{label}: {spec.text} asks for a loop the report does not have "
                             f"({fmt.count(n)} found; {valid})")
    elif spec.kind == "iterations":
        n = len(loop)
        if spec.b is None or spec.b >= n:
            valid = "it has no loop" if n == 0 else f"valid: iterations:A-B with 0 <= A <= B <= {n - 1}"
            raise TraceError("bad_window", f"{label}: {spec.text} asks for iterations the report does not "
                             f"have ({fmt.count(n)} found; {valid})")


def _time_fits(spec: WindowSpec, trace: Trace) -> None:
    """A ``time:`` window must overlap the report's recorded activity (a window of nothing has no numbers):
    ``TraceError('bad_window')`` naming the report's time range otherwise."""
    bounds = activity_bounds(trace)
    if bounds is None or spec.a is None or spec.b is None:
        return
    lo, hi = bounds
    if spec.a >= hi or spec.b <= lo:
        raise TraceError("bad_window", f"{trace.label}: {spec.text} holds none of the report: its activity runs "
                         f"from {lo} ns to {hi} ns after the session start (valid: time:T0-T1 with T0 < {hi}ns "
                         f"and T1 > {lo}ns)")


def check_fits(spec: WindowSpec, trace: Trace) -> None:
    """Whether ``spec`` applies to the ingested report ``trace``, before analysing it: an NVTX name the report
    does not hold, a loop or iterations it does not have, a time range outside its activity or a start-up
    phase it lacks is ``TraceError('bad_window')`` naming the valid range, as ``resolve`` would say later."""
    if spec.kind == "nvtx" and _nvtx_bounds(trace, spec.name)[0] is None:
        raise TraceError("bad_window", f"{trace.label}: no NVTX range named {(spec.name or '')[:80]!r}")
    if spec.kind == "time":
        _time_fits(spec, trace)
    elif spec.kind in ("loop", "iterations"):
        _loop_fits(spec, trace.label, report_loop(trace))
    elif spec.kind == "startup":
        resolve(spec, trace, phase_info(trace))


def resolve(spec: WindowSpec, trace: Trace, info: PhaseInfo) -> tuple[str, tuple[int, int] | None, str]:
    """(phase name for the findings, window bounds or None for the whole report, reason) of one report."""
    if spec.kind == "all":
        return "all", None, "the whole report, as asked"
    if spec.kind == "steady":
        steady = phase_of(info.phases, "steady")
        if steady is None:
            # A one-shot program: its work after set-up, before teardown.
            work = phase_of(info.phases, "work")
            if work is not None:
                return "work", (work.start_ns, work.end_ns), work.reason
            return "whole", None, "no loop found, so the whole report"
        # GPU work after the last iteration (results copied back) is analysed like the loop.
        epilogue = phase_of(info.phases, "epilogue")
        if epilogue is not None:
            return "steady", (steady.start_ns, epilogue.end_ns), steady.reason + "; with the epilogue after it"
        return "steady", (steady.start_ns, steady.end_ns), steady.reason
    if spec.kind == "startup":
        start = phase_of(info.phases, "startup")
        if start is None:
            raise TraceError("bad_window", f"{trace.label}: no start-up phase (no loop, or it starts at once)")
        return "startup", (start.start_ns, start.end_ns), start.reason
    if spec.kind == "time" and spec.a is not None and spec.b is not None:  # parse sets both for a time window
        _time_fits(spec, trace)
        return "time", (int(spec.a), int(spec.b)), f"{spec.text}, as asked"
    if spec.kind == "loop":
        _loop_fits(spec, trace.label, info.loop)
        loops = info.loop.all
        assert spec.a is not None  # parse sets it for a loop window
        lo, hi = loops[spec.a].span
        return "steady", (lo, hi), f"loop {spec.a} of {fmt.count(len(loops))}: {fmt.count(len(loops[spec.a]))} iteration(s), as asked"
    if spec.kind == "iterations":
        loop = info.loop
        _loop_fits(spec, trace.label, loop)
        assert spec.a is not None and spec.b is not None  # parse sets both for an iterations window
        end = int(loop.starts[spec.b + 1]) if spec.b + 1 < len(loop) else int(loop.ends[spec.b])
        return "iterations", (int(loop.starts[spec.a]), end), f"{spec.text} of {fmt.count(len(loop))} ({loop.source})"
    first, last = _nvtx_bounds(trace, spec.name)
    if first is None or last is None:
        raise TraceError("bad_window", f"{trace.label}: no NVTX range named {(spec.name or '')[:80]!r}")
    return "nvtx", (int(first), int(last)), f"{spec.text}, as asked"
