"""The ``kernels`` list of an ncu report: one entry per profiled launch with its memory story and nsys time."""

from __future__ import annotations

from typing import Any

from analysis.diagnosis.ncu.impact import Linker
from analysis.diagnosis.ncu.memory import story
from analysis.model.ncu_metrics import load_launches


def report_kernels(trace: Any, run: Any = None) -> list[dict[str, Any]]:
    """Every profiled launch of ``trace`` (kernel id order) with ``memory``; ``nsys_total_ns`` when the run links it."""
    linker = Linker(run) if run is not None else None
    links: dict[tuple, Any] = {}
    out = []
    for launch in load_launches(trace):
        link = None
        if linker is not None and linker.reports:
            key = launch.group_key
            if key not in links:
                links[key] = linker.link(launch)  # one lookup per kernel configuration, not per launch
            link = links[key]
        out.append({
            "kernel_id": launch.kernel_id, "name": launch.name, "short_name": launch.short_name,
            "grid": list(launch.grid) if launch.grid else None, "block": list(launch.block) if launch.block else None,
            "duration_ns": launch.duration_ns,
            "nsys_total_ns": link.total_ns if link else None, "nsys_launches": link.launches if link else None,
            "memory": story(launch),
        })
    return out
