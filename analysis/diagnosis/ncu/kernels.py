"""The ``kernels`` list of an ncu report: one entry per profiled launch with its memory story and nsys time."""

from __future__ import annotations

import math
from typing import Any

from analysis.diagnosis.ncu import sol
from analysis.diagnosis.ncu.impact import Linker
from analysis.diagnosis.ncu.limiter import limiter
from analysis.diagnosis.ncu.memory import story
from analysis.model.ncu_metrics import load_launches
from analysis.result_parts import NcuKernel


def report_kernels(trace: Any, run: Any = None) -> list[NcuKernel]:
    """Every profiled launch of ``trace`` (kernel id order) with ``memory``; ``nsys_total_ns`` when the run links it.
    Without its saving and causes: the rules find them (``analysis.diagnosis.ncu_gains.annotate_kernels``)."""
    linker = Linker(run) if run is not None else None
    links: dict[tuple, Any] = {}
    out: list[NcuKernel] = []
    for launch in load_launches(trace):
        link = None
        if linker is not None and linker.reports:
            key = launch.group_key
            if key not in links:
                links[key] = linker.link(launch)  # one lookup per kernel configuration, not per launch
            link = links[key]
        out.append(NcuKernel(
            kernel_id=launch.kernel_id, name=launch.name, short_name=launch.short_name,
            grid=tuple(launch.grid) if launch.grid else None, block=tuple(launch.block) if launch.block else None,
            duration_ns=launch.duration_ns,
            nsys_total_ns=link.total_ns if link else None, nsys_launches=link.launches if link else None,
            memory={**story(launch), "sol": _sol_json(launch), "limiter": _limiter_json(launch)},
            estimated_saving_ns=None, causes=()))
    return out


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _sol_json(launch: Any) -> dict[str, Any]:
    """The launch's speed of light (``analysis.diagnosis.ncu.sol``) with its six largest terms."""
    b = sol.bound(launch)
    return {"bound_ns": _finite(b["bound_ns"]), "binding": b["binding"] and {
                k: _finite(v) for k, v in b["binding"].items()},
            "max_saving_ns": _finite(b["max_saving_ns"]), "realistic_saving_ns": _finite(b["realistic_saving_ns"]),
            "realistic_share": b["realistic_share"],
            "terms": [{k: _finite(t[k]) for k in ("kind", "name", "ns", "pct_of_peak", "basis")} for t in b["terms"][:6]]}


def _limiter_json(launch: Any) -> dict[str, Any]:
    lim = limiter(launch)
    ev = {k: _finite(v) for k, v in lim["evidence"].items() if k not in ("binding",)}
    return {"kind": lim["kind"], "name": lim["name"], "reason": lim["reason"], "library": lim["library"],
            "tensor_cores": {k: _finite(v) for k, v in lim["tensor_cores"].items()}, "evidence": ev}
