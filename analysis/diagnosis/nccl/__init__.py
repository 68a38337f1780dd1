"""The findings and the one-sentence verdict on one NCCL log (the NET rules, analysis.diagnosis.rules.nccl)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from analysis.diagnosis.findings import Finding
from analysis.diagnosis.rules.base import Registry
from analysis.diagnosis.rules.nccl import NET_RULES
from analysis.diagnosis.rules.nccl.common import NetRule
from analysis.readers.nccl.model import NcclLog

logger = logging.getLogger(__name__)

def registry() -> Registry:
    return Registry(NET_RULES)


def findings(log: NcclLog, thresholds: Mapping[str, float] | None = None) -> list[Finding]:
    """Every NET rule on ``log``. ``thresholds``: overrides like ``{'NET004.min_channel_share_pct': 25}``
    (those of NET rules are checked: ``ThresholdError``; other rules' are ignored). A rule that crashes is
    logged and skipped; the others still run."""
    reg = registry()
    own = set(reg.ids())
    # A job's overrides name every tool's rules: the NET ones are checked and applied, the others are not ours.
    thresholds = {k: v for k, v in (thresholds or {}).items() if k.partition(".")[0] in own}
    reg.validate_overrides(thresholds)
    out: list[Finding] = []
    for rule_cls in reg:
        params = reg.resolve_params(rule_cls, thresholds)
        try:
            out.extend(rule_cls().check_log(log, params))
        except Exception:  # a broken rule must not take the others down
            logger.exception("NCCL rule failed", extra={"rule_id": rule_cls.id})
    # Which finding names the largest problem: by severity, then each rule's own ``verdict_order``.
    order = {r.id: r.verdict_order for r in reg if issubclass(r, NetRule)}
    sev = {"critical": 0, "warning": 1, "info": 2}
    if log.sources:  # several files merged: each evidence line in its own file
        out = [_in_files(f, log) for f in out]
    return sorted(out, key=lambda f: (sev[f.severity], order.get(f.rule_id, 99)))


def _in_files(f: Finding, log: NcclLog) -> Finding:
    """A finding on a log merged from several files: each evidence line as (``file``, line in that file), and
    the finding's report the file of its first line."""
    evidence = []
    first: str | None = None
    for e in f.evidence:
        line = e.detail.get("line")
        if isinstance(line, int) and not isinstance(line, bool):
            file, at = log.where(line)
            if file is not None:
                first = first or file
                e = dataclasses.replace(e, detail={**e.detail, "file": file, "line": at})
        evidence.append(e)
    return dataclasses.replace(f, evidence=tuple(evidence), report=f.report or first)


def verdict(log: NcclLog, found: list[Finding] | None = None) -> str | None:
    """One sentence naming the largest problem (a failure's root cause, socket fallback, GDR off ...), or None."""
    found = findings(log) if found is None else found
    serious = [f for f in found if f.severity in ("critical", "warning")]
    if not serious:
        return None
    top = serious[0]
    return f"{top.title}: {first_sentence(top.message)}"


def first_sentence(text: str) -> str:
    """The text up to its first sentence end (". " outside a `quoted` log line), ending with one period."""
    quoted = False
    for i, ch in enumerate(text):
        if ch == "`":
            quoted = not quoted
        elif ch == "." and not quoted and text[i + 1:i + 2] in (" ", ""):
            return text[:i + 1]
    return text.rstrip(".") + "."


__all__ = ["findings", "first_sentence", "registry", "verdict"]
