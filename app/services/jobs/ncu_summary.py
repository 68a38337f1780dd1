"""What the metadata DB keeps of an ncu report's ``kernels``: one story per kernel configuration, bounded.

The analysis JSON carries one entry per profiled launch (thousands on a large export, ~2 KB each); the run
page and the API summary need each kernel configuration once, with its launch count and profiled time.
"""

from __future__ import annotations

from typing import Any

# What ``compact_report`` adds to each kept kernel (``analysis.api.ReportSummary``'s ``NcuKernel``), as JSON Schema:
# the API document declares the stored summary with them (``app.api.schemas``).
STORED_KERNEL_KEYS = {"launches": {"type": "integer"}, "profiled_ns": {"type": "number"}}
MAX_STORED = 200  # kernel configurations kept per report, most nsys (else profiled) time first


def compact_report(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``kernels`` reduced to the longest launch of each (name, grid, block), with ``launches`` and
    ``profiled_ns`` of the configuration; ``kernels_total`` / ``kernel_configs_total`` say what was there."""
    kernels = data.get("kernels")
    if not isinstance(kernels, list):
        return data
    groups: dict[tuple, dict[str, Any]] = {}
    for k in kernels:
        key = (k.get("name"), tuple(k.get("grid") or ()), tuple(k.get("block") or ()))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {**k, "launches": 0, "profiled_ns": 0.0}
        elif (k.get("duration_ns") or 0) > (g.get("duration_ns") or 0):
            g.update({**k, "launches": g["launches"], "profiled_ns": g["profiled_ns"]})
        g["launches"] += 1
        g["profiled_ns"] += k.get("duration_ns") or 0.0
    ordered = sorted(groups.values(), key=lambda g: -(g.get("nsys_total_ns") or g["profiled_ns"] or 0))
    return {**data, "kernels": ordered[:MAX_STORED], "kernels_total": len(kernels),
            "kernel_configs_total": len(groups)}
