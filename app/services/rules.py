"""The rule catalogue: every registered rule's published description (docs, thresholds)."""

from __future__ import annotations

from typing import Any

from analysis.rules.registry import default_registry


def catalogue() -> list[dict[str, Any]]:
    """``describe()`` of every rule, in registry order."""
    registry = default_registry()
    return [rule.describe() for rule in registry]
