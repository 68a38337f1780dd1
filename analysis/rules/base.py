"""The rule engine: what a rule is, the registry that lists rules, and running them over a run."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from analysis.findings import Finding
from analysis.trace import Run, Trace
from analysis.window import WindowSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Threshold:
    """A tunable number with its default, unit and meaning (overridable per run or job)."""

    default: float
    unit: str
    help: str


class Skip(Exception):
    """Raised by a rule that cannot run on this input; the message says why and how to collect it."""


@dataclass(frozen=True)
class RuleContext:
    """Everything a rule is given besides the report it looks at, built by ``run_rules`` for each rule.

    ``params`` are this rule's resolved thresholds; ``all_params`` every rule's (this one's included):
    rules that share idle time (see analysis.rules.nsys.gaps) must agree on who owns what, whatever
    subset of rules is selected. ``run`` holds the connection with every report attached (already seen
    through the analysis window); ``window`` is the window spec that was applied (None: the reports as
    given). ``scope`` is ``run`` in ``Rule.check`` and ``report`` in ``Rule.check_report``.
    """

    run: Run
    params: Mapping[str, float] = field(default_factory=dict)
    all_params: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    window: WindowSpec | None = None
    scope: Literal["report", "run"] = "run"

    def for_rule(self, rule_id: str, params: Mapping[str, float]) -> RuleContext:
        """The context of one rule: its thresholds, and every rule's with its own in place."""
        return replace(self, params=params, all_params={**self.all_params, rule_id: params}, scope="run")

    def for_report(self) -> RuleContext:
        return replace(self, scope="report")


class Rule:
    """Base class. Subclasses set the class attributes and implement ``check``.

    The class docstring is the rule's published documentation, with the sections
    *Why it matters*, *How it is detected* and *Advice*.
    """

    id: ClassVar[str]
    name: ClassVar[str]
    category: ClassVar[str]
    tool: ClassVar[str] = "nsys"            # which reports it reads: 'nsys', 'ncu' or 'any'
    requires: ClassVar[tuple[str, ...]] = ()  # normalized tables that must hold rows
    thresholds: ClassVar[dict[str, Threshold]] = {}
    summary: ClassVar[str] = ""             # one line for catalogues
    # The idle this rule owns by what the host was doing then: categories of ``analysis.idle_classes`` (their
    # order is the specificity order), in the phases ``idle_phases`` names (None: every phase). See
    # ``analysis.rules.nsys.idle_claims``; a rule that sets none owns idle by the gap table's precedence.
    owns_idle: ClassVar[tuple[str, ...]] = ()
    idle_phases: ClassVar[tuple[str, ...] | None] = None

    def check(self, ctx: RuleContext) -> list[Finding]:
        """Return the findings for a whole run. Default: ``check_report`` on each report of the tool."""
        out: list[Finding] = []
        report_ctx = ctx.for_report()
        for trace in self.applicable(ctx.run):
            out.extend(self.check_report(trace, report_ctx))
        return out

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        raise NotImplementedError

    def applicable(self, run: Run) -> list[Trace]:
        traces = run.traces if self.tool == "any" else run.of_tool(self.tool)
        return [t for t in traces if all(t.has_rows(table) for table in self.requires)]

    def missing(self, run: Run) -> str | None:
        """Why the rule cannot run on this run at all, or None."""
        traces = run.traces if self.tool == "any" else run.of_tool(self.tool)
        if not traces:
            return f"no {self.tool} report in this run"
        if not self.applicable(run):
            need = ", ".join(self.requires)
            return f"no report has rows in the table(s) this rule needs: {need}"
        return None

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            "id": cls.id,
            "name": cls.name,
            "category": cls.category,
            "tool": cls.tool,
            "summary": cls.summary,
            "doc": cls.doc(),
            "requires": list(cls.requires),
            "thresholds": {
                k: {"default": t.default, "unit": t.unit, "help": t.help} for k, t in cls.thresholds.items()
            },
        }


class Registry:
    """An explicit, ordered list of rules; a duplicate id is an error, never a silent overwrite."""

    def __init__(self, rules: Iterable[type[Rule]]) -> None:
        self._rules: dict[str, type[Rule]] = {}
        names: set[str] = set()
        for rule in rules:
            if rule.id in self._rules:
                raise ValueError(f"duplicate rule id {rule.id}: {rule.__name__} and {self._rules[rule.id].__name__}")
            if rule.name in names:
                raise ValueError(f"duplicate rule name {rule.name}")
            self._rules[rule.id] = rule
            names.add(rule.name)

    def __iter__(self):
        return iter(self._rules.values())

    def __len__(self) -> int:
        return len(self._rules)

    def get(self, rule_id: str) -> type[Rule]:
        try:
            return self._rules[rule_id]
        except KeyError:
            raise KeyError(f"unknown rule {rule_id}") from None

    def ids(self) -> list[str]:
        return list(self._rules)

    def select(self, patterns: Iterable[str] | None) -> list[type[Rule]]:
        """Rules whose id or name matches one of the patterns (exact id, id prefix like 'GPU', or name)."""
        if not patterns:
            return list(self)
        pats = [p.strip() for p in patterns if p.strip()]
        chosen = [r for r in self if any(r.id == p or r.id.startswith(p) or r.name == p for p in pats)]
        unknown = [p for p in pats if not any(r.id == p or r.id.startswith(p) or r.name == p for r in self)]
        if unknown:
            raise KeyError(f"unknown rule(s): {', '.join(unknown)}")
        return chosen

    def resolve_params(self, rule: type[Rule], overrides: Mapping[str, float] | None) -> dict[str, float]:
        """Defaults merged with overrides given as ``{'GPU001.min_gap_us': 200}``."""
        params = {k: float(t.default) for k, t in rule.thresholds.items()}
        for key, value in (overrides or {}).items():
            rid, _, name = key.partition(".")
            if rid != rule.id:
                continue
            if name not in rule.thresholds:
                raise KeyError(f"rule {rule.id} has no threshold {name!r} (it has: {', '.join(rule.thresholds)})")
            params[name] = float(value)
        return params

    def validate_overrides(self, overrides: Mapping[str, float] | None) -> None:
        for key in overrides or {}:
            rid, dot, name = key.partition(".")
            if not dot:
                raise KeyError(f"threshold {key!r} must look like RULE.name, e.g. GPU001.min_gap_us")
            rule = self.get(rid)
            if name not in rule.thresholds:
                raise KeyError(f"rule {rid} has no threshold {name!r} (it has: {', '.join(rule.thresholds)})")


@dataclass(frozen=True)
class RuleResult:
    """How one rule went on one run: ``ok``, ``skipped`` (with the reason) or ``error``."""

    rule_id: str
    status: str
    reason: str | None = None
    findings: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.rule_id, "status": self.status, "reason": self.reason, "findings": self.findings}


def run_rules(
    run: Run, registry: Registry, selected: list[type[Rule]] | None = None,
    overrides: Mapping[str, float] | None = None, window: WindowSpec | None = None,
) -> tuple[list[Finding], list[RuleResult]]:
    """Run rules over a run. A rule that cannot run is skipped; one that crashes is an error; the rest go on.

    ``window``: the spec the run's reports are already seen through, passed on to the rules."""
    findings: list[Finding] = []
    results: list[RuleResult] = []
    base = RuleContext(run, all_params={r.id: registry.resolve_params(r, overrides) for r in registry},
                       window=window)
    for rule_cls in selected if selected is not None else list(registry):
        rule = rule_cls()
        ctx = base.for_rule(rule_cls.id, registry.resolve_params(rule_cls, overrides))
        reason = rule.missing(run)
        if reason:
            results.append(RuleResult(rule_cls.id, "skipped", reason))
            continue
        try:
            found = rule.check(ctx)
        except Skip as exc:
            results.append(RuleResult(rule_cls.id, "skipped", str(exc)))
            continue
        except Exception as exc:  # a broken rule must not take the others down
            logger.exception("rule failed", extra={"rule_id": rule_cls.id})
            results.append(RuleResult(rule_cls.id, "error", f"{type(exc).__name__}: {exc}"))
            continue
        findings.extend(found)
        results.append(RuleResult(rule_cls.id, "ok", None, len(found)))
    return findings, results
