"""What the NET rules share: their base class, evidence from log lines, and the facts several rules read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import Rule, RuleContext, Skip
from analysis.readers.nccl.model import Connection, EnvVar, NcclLog, Pair
from analysis.results import NetExtra, NetFacts

RDMA_KINDS = ("IB", "RoCE", "EFA", "CXI")
RDMA_NETS = ("IB", "IBext", "AWS Libfabric", "OFI")


class NetRule(Rule):
    """A rule over one NCCL log (``check_log``). The run engine has no NCCL report yet: ``check`` says so."""

    category: ClassVar[str] = "network"
    tool: ClassVar[str] = "nccl"
    # Every NET rule's findings hold what it read in the log under one key (``finding``).
    extra_type: ClassVar[type | None] = NetExtra
    # Where the rule's findings come in the log's verdict order among findings of one severity (lower first: a
    # failure, then what slows every byte). No default: every NET rule states it (a registry test fails on one that
    # does not).
    verdict_order: ClassVar[int]

    def check(self, ctx: RuleContext) -> list[Finding]:
        raise Skip("NCCL logs are checked by analysis.diagnosis.nccl.findings(log)")

    def check_log(self, log: NcclLog, params: Mapping[str, float]) -> list[Finding]:
        raise NotImplementedError

    def finding(self, title: str, message: str, evidence: Iterable[Evidence], *, severity: str,
                total: int | None = None, rank: int | None = None, advice: str | None = None,
                facts: NetFacts | None = None) -> Finding:
        ev = tuple(evidence)
        return Finding(rule_id=self.id, title=title, message=message, impact_ns=0, impact_pct=None,
                       advice=advice or self.advice, evidence=ev, evidence_total=total or len(ev), rank=rank,
                       severity=severity, extra=NetExtra(nccl=facts), phase="all")


def line_evidence(line: int | None, text: str | None, *, rank: int | None = None, name: str | None = None,
                  **detail: str | bool | None) -> Evidence:
    """One log line as evidence: its number and its text (as found: the web layer escapes it). ``derived=True``:
    the text is a summary of the line (a table row's figure), not the line itself."""
    d: dict[str, str | int | bool | None] = {"line": line, "text": text}
    d.update({k: v for k, v in detail.items() if v is not None})
    return Evidence(rank=rank, name=name, detail=d)


def rdma_nics(log: NcclLog) -> list[str]:
    """The RDMA NICs the log lists (``mlx5_0 (IB)``), or the plugin's provider and NIC count."""
    names = sorted({f"{n.name} ({n.kind})" for n in log.nics if n.kind in RDMA_KINDS and not n.virtual})
    for provider, count in log.providers().items():
        names.append(f"{provider} ({fmt.count(count) if count is not None else '?'} NICs)")
    return names


def inter_pairs(log: NcclLog) -> list[Pair]:
    return [p for p in log.pairs() if p.inter_node]


def intra_pairs(log: NcclLog) -> list[Pair]:
    return [p for p in log.pairs() if p.inter_node is False]


def pair_text(pairs: Iterable[Pair], limit: int = 6) -> str:
    items = [f"{p.src}->{p.dst}" for p in pairs]
    return ", ".join(items[:limit]) + (f" and {fmt.count(len(items) - limit)} more" if len(items) > limit else "")


def first_connection(log: NcclLog, pair: Pair) -> Connection | None:
    for c in log.connections:
        if c.src == pair.src and c.dst == pair.dst:
            return c
    return None


def env_is(log: NcclLog, name: str, *values: str) -> bool:
    value = log.env_value(name)
    return value is not None and value.strip().lower() in {v.lower() for v in values}


def env_evidence(log: NcclLog, name: str) -> Evidence | None:
    for e in log.env:
        if e.name == name:
            return env_line(e)
    return None


def env_line(e: EnvVar) -> Evidence:
    """An env setting as evidence: NCCL's own line when it printed one, else what the net plugin said."""
    if e.line is not None:
        return line_evidence(e.line, f"{e.name} set by environment to {e.value}", name=e.name, set_by=e.set_by)
    return line_evidence(None, f"{e.name} set by the net plugin", name=e.name, set_by=e.set_by, derived=True)
