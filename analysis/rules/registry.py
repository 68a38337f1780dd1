"""The explicit list of every rule Goodput runs. Ids are stable: never renumber, only add."""

from __future__ import annotations

from analysis.rules.base import Registry, Rule

# Each rule family appends its classes here, in id order (see issues #3 and #4).
NSYS_RULES: list[type[Rule]] = []
NCU_RULES: list[type[Rule]] = []


def default_registry() -> Registry:
    """All rules, nsys first, then ncu. Raises on a duplicate id."""
    return Registry([*NSYS_RULES, *NCU_RULES])
