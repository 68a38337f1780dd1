"""The explicit list of every rule Goodput runs. Ids are stable: never renumber, only add."""

from __future__ import annotations

from analysis.diagnosis.rules.base import Registry
from analysis.diagnosis.rules.ncu import NCU_RULES
from analysis.diagnosis.rules.ncu.ncu008_latency_bound import LatencyBoundMemory
from analysis.diagnosis.rules.ncu.ncu009_cache_reuse import PoorCacheReuse
from analysis.diagnosis.rules.ncu.ncu010_roofline import FarFromRoofline
from analysis.diagnosis.rules.nsys import NSYS_RULES


def default_registry() -> Registry:
    """All rules, nsys first, then ncu. Raises on a duplicate id."""
    return Registry([*NSYS_RULES, *NCU_RULES,
                     LatencyBoundMemory, PoorCacheReuse, FarFromRoofline])  # the rules over the ncu memory story


def finding_extras() -> dict[str, type]:
    """Rule id -> the typed shape of its findings' ``extra`` (``Rule.extra_type``) for every rule whose findings a
    result holds: the registry's and the NET rules' (an NCCL log's, ``analysis.diagnosis.nccl``). The result schema
    types each rule's findings by it."""
    from analysis.diagnosis.rules.nccl import NET_RULES  # an NCCL log's rules: the NCCL reader's model, 20 ms

    return {**default_registry().finding_extras(), **Registry(NET_RULES).finding_extras()}
