"""The ``kernels`` list of an ncu report: one entry per profiled launch with its memory story and nsys time."""

from __future__ import annotations

import math
from typing import Any, TypedDict, TypeVar, cast

from analysis.diagnosis.ncu import sol
from analysis.diagnosis.ncu.impact import Linker
from analysis.diagnosis.ncu.limiter import LimiterNumbers, TensorCores, limiter
from analysis.diagnosis.ncu.memory import story
from analysis.model.ncu_metrics import load_launches
from analysis.result_parts import NcuKernel

_V = TypeVar("_V")


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


def _finite(v: _V) -> _V | None:
    return None if isinstance(v, float) and not math.isfinite(v) else v


class SolTerm(TypedDict):
    """One of the speed of light's largest terms in the memory story (``sol.Term``, an infinity as None)."""

    kind: str
    name: str
    ns: float | None
    pct_of_peak: float | None
    basis: str


class SolPart(TypedDict):
    """The launch's speed of light in its memory story (``sol.bound``) with its six largest terms."""

    bound_ns: float | None
    binding: sol.Binding | None
    max_saving_ns: float | None
    realistic_saving_ns: float | None
    realistic_share: float
    terms: list[SolTerm]


class LimiterPart(TypedDict):
    """The launch's limiter in its memory story (``limiter.limiter``): what bounds it, why, the library, its tensor
    cores and the metrics behind it (without the binding unit, which ``sol`` gives)."""

    kind: str
    name: str
    reason: str
    library: str | None
    tensor_cores: TensorCores
    evidence: LimiterNumbers


def _sol_json(launch: Any) -> SolPart:
    """The launch's speed of light (``analysis.diagnosis.ncu.sol``) with its six largest terms."""
    b = sol.bound(launch)
    top = b["binding"]
    return {"bound_ns": _finite(b["bound_ns"]),
            "binding": top and sol.Binding(kind=top["kind"], name=top["name"], basis=top["basis"],
                                           pct_of_peak=_finite(top["pct_of_peak"])),
            "max_saving_ns": _finite(b["max_saving_ns"]), "realistic_saving_ns": _finite(b["realistic_saving_ns"]),
            "realistic_share": b["realistic_share"],
            "terms": [SolTerm(kind=t["kind"], name=t["name"], ns=_finite(t["ns"]), pct_of_peak=_finite(t["pct_of_peak"]),
                              basis=t["basis"]) for t in b["terms"][:6]]}


def _limiter_json(launch: Any) -> LimiterPart:
    lim = limiter(launch)
    # The same keys as the limiter's evidence, in its order, less the binding unit: the numbers, infinities as None.
    ev = cast("LimiterNumbers", {k: _finite(v) for k, v in lim["evidence"].items() if k != "binding"})
    tc = lim["tensor_cores"]
    return {"kind": lim["kind"], "name": lim["name"], "reason": lim["reason"], "library": lim["library"],
            "tensor_cores": TensorCores(family=tc["family"], used=tc["used"], instructions=_finite(tc["instructions"]),
                                        pipe_pct=_finite(tc["pipe_pct"]), legacy_path=tc["legacy_path"]),
            "evidence": ev}
