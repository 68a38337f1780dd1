"""Which host data the capture collected: the flags a sentence may ask for, and those it must not (already on).

A flag was on when the export's capture settings say so (nsys 2023.3+ records them; the ingest keeps the two that
matter in ``meta``: ``capture_sample_cpu``, ``capture_osrt``) or when its table holds rows anywhere in the report
(older exports record no settings). A flag that was on and recorded nothing where a sentence looks is not asked for
again: the sentence says nothing was recorded there.
"""

from __future__ import annotations

from analysis.model.trace import Trace

# (flag, normalized table, meta key of the capture setting)
FLAGS = (("--sample=cpu", "cpu_samples", "capture_sample_cpu"), ("--trace=osrt", "osrt", "capture_osrt"))


def captured(trace: Trace) -> dict[str, bool]:
    """For each flag that shows the host's work, whether the capture used it (settings, else rows in the whole
    report, not only in a window)."""
    meta = trace.meta
    out = {}
    for flag, table, key in FLAGS:
        on = meta.get(key) == "true"
        if not on and table in trace.tables:
            on = trace.scalar(f"SELECT 1 FROM {trace.stored(table)} LIMIT 1") is not None  # noqa: S608 - constants
        out[flag] = on
    return out


def missing(trace: Trace) -> list[str]:
    """The flags the capture did not use, in ``FLAGS`` order."""
    return [flag for flag, on in captured(trace).items() if not on]
