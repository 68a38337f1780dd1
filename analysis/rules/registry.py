"""The explicit list of every rule Goodput runs. Ids are stable: never renumber, only add."""

from __future__ import annotations

from analysis.rules.base import Registry
from analysis.rules.ncu import NCU_RULES
from analysis.rules.nsys import NSYS_RULES


def default_registry() -> Registry:
    """All rules, nsys first, then ncu. Raises on a duplicate id."""
    return Registry([*NSYS_RULES, *NCU_RULES])
