"""The rule catalogue: every registered rule's published description (docs, thresholds)."""

from __future__ import annotations

from typing import Any


def catalogue() -> list[dict[str, Any]]:
    """``describe()`` of every rule, in registry order."""
    # Imported on use: loading every rule is only needed here, not to start the web app.
    from analysis.rules.registry import default_registry

    return [rule.describe() for rule in default_registry()]
