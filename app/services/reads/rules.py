"""The rule catalogue: every registered rule's published description (docs, thresholds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analysis.api import rule_catalogue


def catalogue() -> Sequence[Mapping[str, Any]]:
    """``describe()`` of every rule, in registry order."""
    # The rules are loaded on use (inside analysis.api): only needed here, not to start the web app.
    return rule_catalogue()
