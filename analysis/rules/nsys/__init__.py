"""Rules over Nsight Systems reports (issue #3). NSYS_RULES lists them explicitly, in id order."""

from __future__ import annotations

from analysis.rules.base import Rule

NSYS_RULES: list[type[Rule]] = []
