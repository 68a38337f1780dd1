"""Rules over Nsight Compute reports (issue #4). NCU_RULES lists them explicitly, in id order."""

from __future__ import annotations

from analysis.rules.base import Rule

NCU_RULES: list[type[Rule]] = []
