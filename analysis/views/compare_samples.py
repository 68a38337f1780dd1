"""The samples a comparison tests, read from a report's DuckDB file (read-only) inside the window its
analysis judged: the duration of every kernel launch, by kernel name, and the per-iteration records of
its loop (``analysis.loops.steps``: step time and what each step's GPU time was spent on).

A launch belongs to the window when it starts inside it; an iteration when it lies wholly inside it
(as in the step anatomy). Without a window (a report the analysis did not window) the whole report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Per-step metrics: the key in a comparison -> the column of the iteration records.
STEP_METRICS = {"step_time_ns": "ns", "compute_ns": "compute_ns", "comm_exposed_ns": "comm_exposed_ns",
                "memory_only_ns": "memory_only_ns", "idle_ns": "idle_ns"}


@dataclass
class ReportSamples:
    """One report's samples: kernel name -> launch durations (ns), and per-step metric -> values (ns).
    ``steps_source``: where the step records came from ("iterations" table, "json" records, or None)."""

    kernels: dict[str, np.ndarray] = field(default_factory=dict)
    starts: dict[str, np.ndarray] = field(default_factory=dict)   # each launch's start, aligned with ``kernels``
    steps: dict[str, np.ndarray] = field(default_factory=dict)
    steps_source: str | None = None
    device: int | None = None              # the GPU the step records were measured on
    bounds: tuple[np.ndarray, np.ndarray] | None = None   # the steps' [start, end), to measure them again
    path: Path | None = None

    @property
    def step_count(self) -> int:
        return len(self.steps.get("step_time_ns", ()))


def report_window(report: Mapping[str, Any]) -> tuple[int, int] | None:
    """The [start, end) the report's analysis judged (its ``window``), None for the whole report."""
    w = report.get("window")
    if isinstance(w, dict) and isinstance(w.get("start_ns"), int) and isinstance(w.get("end_ns"), int):
        return int(w["start_ns"]), int(w["end_ns"])
    return None


def _json_steps(report: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The per-iteration records the report dict carries (the first ones only: a fallback for files that
    predate the ``iterations`` table)."""
    it = report.get("iterations")
    ana = it.get("anatomy") if isinstance(it, dict) else None
    recs = ana.get("records") if isinstance(ana, dict) else None
    if not recs:
        return {}
    return {key: np.asarray([int(r.get(col) or 0) for r in recs], dtype=np.int64) for key, col in STEP_METRICS.items()}


def read_samples(trace_path: Path, report: Mapping[str, Any]) -> ReportSamples:
    """The samples of one ingested report within the window of its analysis (``report``: its dict)."""
    from analysis.loops.steps import TABLE
    from analysis.model.trace import Trace

    window = report_window(report)
    lo, hi = window if window is not None else (-(2**63 - 1), 2**63 - 1)
    out = ReportSamples(path=Path(trace_path))
    trace = Trace(Path(trace_path), Path(trace_path).name)
    try:
        if trace.has_rows("kernels"):
            where = f"start_ns >= {lo} AND start_ns < {hi}"
            names_sql = (f"SELECT n, (row_number() OVER (ORDER BY n) - 1)::BIGINT AS i FROM (SELECT DISTINCT "  # noqa: S608
                         f"COALESCE(name, short_name, '') AS n FROM kernels WHERE {where})")
            names = [r[0] for r in trace.sql(f"{names_sql} ORDER BY i")]
            if names:
                # Integer columns only through NumPy: the name travels as its position in ``names``.
                cols = trace.arrays(f"""
                    WITH n AS ({names_sql})
                    SELECT n.i AS i, (k.end_ns - k.start_ns)::BIGINT AS d, k.start_ns::BIGINT AS s
                    FROM kernels k JOIN n ON n.n = COALESCE(k.name, k.short_name, '')
                    WHERE k.{where.replace(' AND ', ' AND k.')}""")  # noqa: S608 - integers
                idx, dur, start = cols["i"], cols["d"], cols["s"]
                order = np.argsort(idx, kind="stable")
                idx, dur, start = idx[order], dur[order], start[order]
                cuts = np.searchsorted(idx, np.arange(len(names) + 1))
                out.kernels = {name: dur[cuts[i]:cuts[i + 1]] for i, name in enumerate(names)}
                out.starts = {name: start[cuts[i]:cuts[i + 1]] for i, name in enumerate(names)}
        if TABLE in trace.tables:
            cols = trace.arrays(f"SELECT {', '.join(sorted(set(STEP_METRICS.values())))}, start_ns, end_ns, "  # noqa: S608
                                f"COALESCE(device, -1) AS device FROM {TABLE} "
                                f"WHERE start_ns >= {lo} AND end_ns <= {hi} ORDER BY idx")
            out.steps = {key: cols[col].astype(np.int64) for key, col in STEP_METRICS.items()}
            out.steps_source = "iterations"
            out.bounds = (cols["start_ns"].astype(np.int64), cols["end_ns"].astype(np.int64))
            devices = set(cols["device"].tolist())
            out.device = int(devices.pop()) if len(devices) == 1 and -1 not in devices else None
        else:
            out.steps = _json_steps(report)
            out.steps_source = "json" if out.steps else None
    finally:
        trace.close()
    if out.steps_source and not out.step_count:
        out.steps, out.steps_source = {}, None
    return out


def on_device(samples: ReportSamples, device: int) -> ReportSamples | None:
    """The same steps measured on another GPU of the report (the one with the most operations among
    those numbered ``device``): two captures of one job whose loops were found on different GPUs compare
    the same GPU. None when the report has no such GPU or its file is not at hand."""
    from analysis.loops.steps import parts
    from analysis.model.activity import unit_ops
    from analysis.model.trace import Trace

    if samples.bounds is None or samples.path is None or not samples.path.is_file():
        return None
    trace = Trace(samples.path, samples.path.name)
    try:
        units = [u for u in unit_ops(trace) if u.device == device]
    finally:
        trace.close()
    if not units:
        return None
    u = max(units, key=len)
    lo, hi = samples.bounds
    measured = parts(u, lo, hi)
    steps = {key: (hi - lo if col == "ns" else measured[col]).astype(np.int64) for key, col in STEP_METRICS.items()}
    return ReportSamples(kernels=samples.kernels, starts=samples.starts, steps=steps, steps_source=f"{samples.steps_source}, device {device}",
                         device=device, bounds=samples.bounds, path=samples.path)


def merge_kernel_samples(per_report: list[ReportSamples]) -> dict[str, np.ndarray]:
    """Launch durations of several reports (the ranks of a run) together, by kernel name."""
    acc: dict[str, list[np.ndarray]] = {}
    for s in per_report:
        for name, d in s.kernels.items():
            acc.setdefault(name, []).append(d)
    return {name: np.concatenate(parts) for name, parts in acc.items()}


def kernel_per_step(samples: ReportSamples, counts: bool = False) -> dict[str, np.ndarray]:
    """Each kernel's time in each of the report's steps (the sum of its launches that start inside the step,
    0 where it has none; with ``counts``, the number of those launches), by kernel name; empty without
    steps. Launches outside every step count nowhere."""
    if samples.bounds is None or not samples.kernels or not samples.starts:
        return {}
    lo, hi = samples.bounds
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    out = {}
    for name, dur in samples.kernels.items():
        st = samples.starts.get(name)
        if st is None or len(st) != len(dur):
            continue
        j = np.searchsorted(lo, st, side="right") - 1
        inside = (j >= 0) & (st < hi[np.maximum(j, 0)])
        out[name] = np.bincount(j[inside], weights=None if counts else dur[inside], minlength=len(lo)).astype(np.int64)
    return out


def merge_per_step(per_report: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-step kernel times of several reports together: every (report, step) is one sample; a kernel a
    report with steps never ran contributes zeros for its steps."""
    names = sorted({n for d in per_report for n in d})
    out: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for d in per_report:
        steps = len(next(iter(d.values()))) if d else 0
        for n in names:
            out[n].append(d.get(n, np.zeros(steps, dtype=np.int64)))
    return {n: np.concatenate(v) if v else np.empty(0, dtype=np.int64) for n, v in out.items()}
