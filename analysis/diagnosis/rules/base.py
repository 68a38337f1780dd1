"""The rule engine: what a rule is, the registry that lists rules, and running them over a run."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, NamedTuple, TypedDict

from analysis import fmt
from analysis.diagnosis.findings import Finding, unrepresentable
from analysis.loops.window import WindowSpec
from analysis.model.trace import Run, Trace

logger = logging.getLogger(__name__)


# The longest time a threshold may name: about 28 hours, longer than any profile, and in ns (1e14) far from
# int64's end, so no rule's arithmetic on it can overflow.
MAX_US = 1e11


class ThresholdError(KeyError, ValueError):
    """An override a rule cannot take: unknown, or not a number of the threshold's type and range. A
    KeyError for the callers that report unknown rules and thresholds the same way."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ThresholdInfo(TypedDict):
    """A threshold as published (``Threshold.describe``: the Rules page, ``GET /api/v1/rules``, the CLI)."""

    default: float
    unit: str
    help: str
    type: str
    minimum: float | None
    maximum: float | None
    special: list[float]
    range: str


class RuleInfo(TypedDict):
    """A rule as published (``Rule.describe``): its id, name, category, tool, summary, documentation, the tables it
    needs and its thresholds."""

    id: str
    name: str
    category: str
    tool: str
    summary: str
    doc: str
    requires: list[str]
    thresholds: dict[str, ThresholdInfo]


class RuleOutcome(TypedDict):
    """How one rule went, as JSON (``RuleResult.to_dict``)."""

    id: str
    status: str
    reason: str | None
    findings: int


@dataclass(frozen=True)
class Threshold:
    """A tunable number with its default, unit, meaning and the range it may take (overridable per run or job).

    ``minimum``/``maximum`` are mandatory in practice (a test over the registry fails on a threshold without
    them): a value outside them would be refused only by the rule's arithmetic, as an overflow, a
    division by zero or an infinity in the findings. ``integer``: whole numbers only (default: counts).
    ``special``: values outside the range with a meaning of their own (``0`` = the typical peak).
    """

    default: float
    unit: str
    help: str
    minimum: float | None = None
    maximum: float | None = None
    integer: bool | None = None
    special: tuple[float, ...] = ()

    @property
    def is_integer(self) -> bool:
        return self.unit == "count" if self.integer is None else self.integer

    @property
    def kind(self) -> str:
        return "integer" if self.is_integer else "number"

    def range_text(self) -> str:
        """``a whole number from 1 to 1000000``, with the special values when there are any."""
        lo = "-inf" if self.minimum is None else fmt.exact(self.minimum)
        hi = "inf" if self.maximum is None else fmt.exact(self.maximum)
        unit = "" if self.unit in ("count", "ratio") else f" {self.unit}"
        text = f"{'a whole number' if self.is_integer else 'a number'} from {lo} to {hi}{unit}"
        return text + "".join(f" (or {fmt.exact(v)})" for v in self.special)

    def coerce(self, value: Any) -> float:
        """``value`` (a number or its text) as this threshold takes it; ValueError saying what it must be."""
        if isinstance(value, bool):
            raise ValueError(f"must be {self.range_text()}")
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError, OverflowError):  # text that is no number, an int past float's range
            raise ValueError(f"must be {self.range_text()}") from None
        if number in self.special:
            return number
        if (not math.isfinite(number) or (self.is_integer and not number.is_integer())
                or (self.minimum is not None and number < self.minimum)
                or (self.maximum is not None and number > self.maximum)):
            raise ValueError(f"must be {self.range_text()}")
        return number

    def describe(self) -> ThresholdInfo:
        return {"default": self.default, "unit": self.unit, "help": self.help, "type": self.kind,
                "minimum": self.minimum, "maximum": self.maximum, "special": list(self.special),
                "range": self.range_text()}


class Skip(Exception):
    """Raised by a rule that cannot run on this input; the message says why and how to collect it."""


@dataclass(frozen=True)
class RuleContext:
    """Everything a rule is given besides the report it looks at, built by the engine (``evaluate``) for each rule.

    ``params`` are this rule's resolved thresholds; ``all_params`` every rule's (this one's included):
    rules that share idle time (see analysis.diagnosis.rules.nsys.gaps) must agree on who owns what, whatever
    subset of rules is selected. ``run`` holds the connection with every report attached (already seen
    through the analysis window); ``window`` is the window spec that was applied (None: the reports as
    given). ``scope`` is ``run`` in ``Rule.check`` and ``report`` in ``Rule.check_report``.
    """

    run: Run
    params: Mapping[str, float] = field(default_factory=dict)
    all_params: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # The registered rules that own idle, by category or by their part in the gap table (``Registry.idle_claimers``):
    # every rule reading the idle claims or the gap owners (``idle_claims.claims``, ``gaps.owned``) passes them on. Whoever builds the context
    # states them (the engine: the whole registry's, whatever rules are selected).
    claimers: tuple[type[Rule], ...] = field(kw_only=True)
    window: WindowSpec | None = None
    scope: Literal["report", "run"] = "run"

    def for_rule(self, rule_id: str, params: Mapping[str, float]) -> RuleContext:
        """The context of one rule: its thresholds, and every rule's with its own in place."""
        return replace(self, params=params, all_params={**self.all_params, rule_id: params}, scope="run")

    def for_report(self) -> RuleContext:
        return replace(self, scope="report")


@dataclass(frozen=True)
class RunFacts:
    """What the run-level step (``analysis.run.runner``) gives a rule of scope ``run``: a DuckDB connection on which
    ``sources[i]`` is a relation of participant ``i``'s NCCL kernels (``pid, device, name, category, start_ns,
    end_ns``, at least), and per participant (an nsys report with NCCL kernels in its window, in run order) its
    label, rank, host, time-base offset (``Run.offsets``), analysis window in its own times (None: all of it) and
    GPU-active span."""

    con: Any
    sources: list[str]
    labels: list[str]
    ranks: list[int | None]
    hosts: list[str | None]
    offsets: list[int]
    windows: list[tuple[int, int] | None]
    spans: list[int]


class RoundTrip(NamedTuple):
    """A rule's part of the host's per-launch round trip (``Rule.round_trip``): what the verdict calls it, the step
    that removes it, and whether the rule measures the whole round trip (its finding carries ``short_gap_idle_ns``)."""

    part: str
    step: str
    whole: bool = False


class Rule:
    """Base class. Subclasses set the class attributes and implement ``check``.

    The class docstring is the rule's published documentation, with the sections
    *Why it matters* and *How it is detected*; ``doc()`` adds the *Advice* section from ``advice``, the
    one place a rule states its advice (its findings carry the same text, or, where the advice depends
    on the cause found, the cause's own advice).
    """

    id: ClassVar[str]
    name: ClassVar[str]
    category: ClassVar[str]
    tool: ClassVar[str] = "nsys"            # which reports it reads: 'nsys', 'ncu' or 'any'
    requires: ClassVar[tuple[str, ...]] = ()  # normalized tables that must hold rows
    thresholds: ClassVar[dict[str, Threshold]] = {}
    summary: ClassVar[str] = ""             # one line for catalogues
    advice: ClassVar[str] = ""              # what to do about it: the docs' *Advice* and the findings' advice
    # Where the engine runs it (analysis.run.runner): ``report``, on each report in step 1; ``cross_report``,
    # also over all the run's nsys reports together after step 1 (they compare reports' own tables);
    # ``run``, only in the run-level step, over the reports' compact facts.
    scope: ClassVar[Literal["report", "cross_report", "run"]] = "report"
    # The rule judges idle that a host-paced loop shows between iterations by design: there its findings
    # are information, not defects.
    judges_pacing_idle: ClassVar[bool] = False
    # Other tools' reports the rule reads when the run has them (``ncu``: step 1 of an nsys report runs
    # before the run's ncu reports are known, so the rule runs again with them attached).
    reads_tools: ClassVar[tuple[str, ...]] = ()
    # The idle this rule owns by what the host was doing then: categories of ``analysis.diagnosis.idle_classes`` (their
    # order is the specificity order), in the phases ``idle_phases`` names (None: every phase). See
    # ``analysis.diagnosis.rules.nsys.idle_claims``; a rule that sets none owns idle by the gap table's precedence.
    owns_idle: ClassVar[tuple[str, ...]] = ()
    idle_phases: ClassVar[tuple[str, ...] | None] = None
    # The rule's part in the gap table (``analysis.diagnosis.rules.nsys.gaps``), which gives what no ``owns_idle`` claims to
    # one structural owner: ``long_gap`` owns the gaps of at least its ``min_gap_us`` (GPU001), ``short_runs`` the gaps
    # inside runs of its ``min_run_kernels`` kernels under ``short_kernel_us`` (KRN001), ``low_utilization`` what is
    # left in windows busy under its ``max_busy_pct`` (GPU002: ``window_min_us``, ``max_windows``). Those thresholds
    # decide ownership for every rule. ``opened_in``: the calls in progress as a gap opened that describe the rule's
    # pattern, not ownership (``sync``: SYNC001; ``blocking_copy``: MEM002).
    gap_role: ClassVar[Literal["long_gap", "short_runs", "low_utilization"] | None] = None
    opened_in: ClassVar[Literal["sync", "blocking_copy"] | None] = None
    # The premise of a rule that can lead the verdict (docs/rules.md): what must hold for its mechanism, checked
    # on the evidence of each finding, which carries ``premise_holds`` and ``premise`` (what showed it). The verdict
    # takes only findings whose premise held. Empty: the rule's finding is its own evidence (no mechanism to check).
    premise: ClassVar[str] = ""
    # The verdict an nsys rule's finding gives when it owns the most of an idle GPU's time
    # (``analysis.diagnosis.verdict``): its kind (one of the verdict's ``KINDS``) and the next step it says.
    # ``verdict_kind`` None: the rule leads no verdict of its own (another verdict speaks for it, or its finding is
    # evidence only). No default: every nsys rule states both, and a registry test fails on one that does not.
    verdict_kind: ClassVar[str | None]
    next_step: ClassVar[str]
    # The verdict kind a finding of a rule that leads no verdict of its own stands for (``finding_kind``): the verdict
    # that speaks for it (KRN005: ``gpu_bound_kernel``; the phase rules: ``startup``). None: its ``verdict_kind``.
    stands_for: ClassVar[str | None] = None
    # The typed shape of the rule's finding ``extra`` (a dataclass of ``analysis.results`` the rule builds, made JSON by
    # ``extra_json``); the result schema types the rule's findings by it (``Registry.finding_extras``). Every rule
    # declares one (the default None only stands for a class that is no registered rule): a registry test fails on a
    # rule without it, and when a rule's findings carry a key its type lacks.
    extra_type: ClassVar[type | None] = None
    # What else the verdict reads of an nsys rule's finding (``analysis.diagnosis.verdict``), beyond its kind and next
    # step; each default says "nothing particular", and the verdict names no rule id (a test reads its source).
    # ``one_off_phase``: the one-off verdict (``startup``) that names this rule's finding as the one it speaks for
    # (PHASE001). ``may_be_pause``: the finding's idle may be a one-shot program's deliberate sleep (``verdict._pause``,
    # HOST001's OS calls). ``leads_idle``: False when the finding speaks only for a busy GPU, never for an idle one
    # (KRN005). ``host_work``: its idle is the launching thread busy with its own serial work, counted as one part of a
    # host-bound verdict's cost. ``unnamed_host_work``: that work is named by no call, only by CPU samples (GPU001's
    # gaps): the verdict's step moves the sampled work, or asks for the samples. ``round_trip``: the part of the host's
    # per-launch round trip the rule owns idle in, with the step that removes it (``RoundTrip.whole``: the rule
    # measures the round trip itself, KRN001). ``busy_role``: what the finding says when the GPU is busy:
    # ``copy_bound`` (the copies fill the GPU's time; its step is the copy-bound verdict's when no copy finding ran),
    # ``copies`` (a copy finding that may lead it), ``launch_shape``, ``dominant_kernel``.
    one_off_phase: ClassVar[str | None] = None
    # A rule whose cost is one phase's wall time on each rank (PHASE001: ``startup``), not time on the rank's GPU: the
    # run's roll-up costs it as the union of that phase across the ranks (``analysis.run.rollup.wall_union``).
    wall_phase: ClassVar[str | None] = None
    # What the run-level step adds to the rule's findings from the run's other reports (``analysis.run``): ``ranks``,
    # every rank's share of its collective groups (COMM003, ``facts.comm003_across``); ``mpi_waiting``, how much of its
    # idle was waiting for an MPI peer (HOST003, ``waiting.mpi_apart``); ``collective_waiting``, its exposed time less
    # the waiting for the last rank (COMM001, ``waiting.waiting_apart``).
    run_split: ClassVar[Literal["ranks", "mpi_waiting", "collective_waiting"] | None] = None
    may_be_pause: ClassVar[bool] = False
    leads_idle: ClassVar[bool] = True
    host_work: ClassVar[bool] = False
    unnamed_host_work: ClassVar[bool] = False
    round_trip: ClassVar[RoundTrip | None] = None
    busy_role: ClassVar[Literal["copy_bound", "copies", "launch_shape", "dominant_kernel"] | None] = None

    @classmethod
    def verdict_step(cls, finding: Finding) -> str:
        """The next step the verdict says when ``finding`` (one of this rule's) leads it: ``next_step``; a rule
        whose step depends on what its finding found overrides it (MEM004: the faults' direction; MEM002: no pageable
        copy, so pinning fixes nothing)."""
        return getattr(cls, "next_step", "")

    @classmethod
    def idle_unrecorded(cls, finding: Finding) -> bool:
        """Whether ``finding``'s idle is mostly idle in which nothing of the host's was recorded (no call, range, CPU
        sample or switch-out): an absence of evidence, not a cause (GPU001 overrides it)."""
        return False

    @classmethod
    def finding_kind(cls, finding: Finding) -> str | None:
        """The verdict kind ``finding`` (one of this rule's) stands for (``analysis.diagnosis.verdict``):
        ``stands_for``, else an nsys rule's ``verdict_kind``; None: it speaks for no verdict. A rule whose kind depends
        on the finding overrides this (GPU001: idle inside set-up calls is start-up)."""
        if cls.stands_for is not None:
            return cls.stands_for
        return getattr(cls, "verdict_kind", None) if cls.tool == "nsys" else None

    def check(self, ctx: RuleContext) -> list[Finding]:
        """Return the findings for a whole run. Default: ``check_report`` on each report of the tool."""
        out: list[Finding] = []
        report_ctx = ctx.for_report()
        for trace in self.applicable(ctx.run):
            out.extend(self.check_report(trace, report_ctx))
        return out

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        raise NotImplementedError

    def check_facts(self, facts: RunFacts, params: Mapping[str, float]) -> list[Finding]:
        """A rule of scope ``run``: its findings over the run's compact facts, in the run-level step (once every
        report of the run is analysed; ``params``: its thresholds). Every rule of that scope implements it."""
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
        text = inspect.cleandoc(cls.__doc__ or "")
        return f"{text}\n\n*Advice*: {cls.advice}" if cls.advice else text

    @classmethod
    def describe(cls) -> RuleInfo:
        return {
            "id": cls.id,
            "name": cls.name,
            "category": cls.category,
            "tool": cls.tool,
            "summary": cls.summary,
            "doc": cls.doc(),
            "requires": list(cls.requires),
            "thresholds": {
                k: t.describe() for k, t in cls.thresholds.items()
            },
        }


def split_in_run(rules: Iterable[type[Rule]], split: str) -> set[str]:
    """The ids of ``rules`` whose findings the run-level step completes with ``split`` (``Rule.run_split``)."""
    return {r.id for r in rules if r.run_split == split}


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

    def idle_claimers(self) -> tuple[type[Rule], ...]:
        """The rules that own idle, in registry order: by category (``Rule.owns_idle``) or by their part in the gap
        table (``Rule.gap_role``): ``RuleContext.claimers``."""
        return tuple(r for r in self._rules.values() if r.owns_idle or r.gap_role is not None)

    def finding_extras(self) -> dict[str, type]:
        """Rule id -> the typed shape of its findings' ``extra`` (``Rule.extra_type``), for the rules that declare one."""
        return {r.id: r.extra_type for r in self._rules.values() if r.extra_type is not None}

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
        """Defaults merged with overrides given as ``{'GPU001.min_gap_us': 200}`` (checked: ThresholdError)."""
        params = {k: float(t.default) for k, t in rule.thresholds.items()}
        for key, value in (overrides or {}).items():
            rid, _, name = key.partition(".")
            if rid != rule.id:
                continue
            params[name] = self._checked(rule, name, value)
        return params

    def validate_overrides(self, overrides: Mapping[str, Any] | None) -> dict[str, float]:
        """Every override checked against its rule's threshold (name, type, range), before any work; the
        values as numbers. Raises ThresholdError naming the first bad one."""
        out: dict[str, float] = {}
        for key, value in (overrides or {}).items():
            rid, dot, name = key.partition(".")
            if not dot:
                raise ThresholdError(f"threshold {key!r} must look like RULE.name, e.g. GPU001.min_gap_us")
            try:
                rule = self.get(rid)
            except KeyError as exc:
                raise ThresholdError(exc.args[0]) from None
            out[key] = self._checked(rule, name, value)
        return out

    @staticmethod
    def _checked(rule: type[Rule], name: str, value: Any) -> float:
        threshold = rule.thresholds.get(name)
        if threshold is None:
            raise ThresholdError(f"rule {rule.id} has no threshold {name!r} (it has: {', '.join(rule.thresholds)})")
        try:
            return threshold.coerce(value)
        except ValueError as exc:
            raise ThresholdError(f"{rule.id}.{name} {exc}; got {_shown(value)}") from None


def _shown(value: Any) -> str:
    try:
        text = str(value)
    except ValueError:  # an int longer than Python converts to text
        return "a number too long to show"
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class RuleResult:
    """How one rule went on one run: ``ok``, ``skipped`` (with the reason) or ``error``."""

    rule_id: str
    status: str
    reason: str | None = None
    findings: int = 0

    def to_dict(self) -> RuleOutcome:
        return {"id": self.rule_id, "status": self.status, "reason": self.reason, "findings": self.findings}


def evaluate(run: Run, rules: Iterable[type[Rule]], base: RuleContext,
             all_params: Mapping[str, Mapping[str, float]], *, defer_run_scope: bool = False,
             ) -> tuple[list[Finding], list[RuleResult]]:
    """The engine loop, the one production and tests use: each rule in turn on ``run``.

    A rule whose input is absent is ``missing`` (with the reason); one that raises ``Skip`` is
    ``skipped``; one that crashes is ``error`` and the others still run. ``defer_run_scope``: rules of
    scope ``run`` only say they apply (``run_level``): the run-level step runs them over the facts."""
    findings: list[Finding] = []
    results: list[RuleResult] = []
    for rule_cls in rules:
        for trace in run.traces:  # what earlier rules read is dropped where this rule could pass the budget on top
            trace.make_room()
        rule = rule_cls()
        reason = rule.missing(run)
        if reason:
            results.append(RuleResult(rule_cls.id, "missing", reason))
            continue
        if defer_run_scope and rule_cls.scope == "run":
            results.append(RuleResult(rule_cls.id, "run_level"))
            continue
        try:
            found = rule.check(base.for_rule(rule_cls.id, all_params[rule_cls.id]))
        except Skip as exc:
            results.append(RuleResult(rule_cls.id, "skipped", str(exc)))
            continue
        except Exception as exc:  # a broken rule must not take the others down
            logger.exception("rule failed", extra={"rule_id": rule_cls.id})
            results.append(RuleResult(rule_cls.id, "error", f"{type(exc).__name__}: {exc}"))
            continue
        # A number JSON cannot hold (an infinity from a division, a sum past int64) would make the whole
        # result unreadable or unstorable: the rule is in error instead, and the others still count.
        bad = next((w for f in found if (w := unrepresentable(f.to_dict(), "findings"))), None)
        if bad is not None:
            logger.error("rule produced an unrepresentable number at %s", bad, extra={"rule_id": rule_cls.id})
            results.append(RuleResult(rule_cls.id, "error", f"a number JSON cannot hold at {bad}"))
            continue
        findings.extend(found)
        results.append(RuleResult(rule_cls.id, "ok", None, len(found)))
    return findings, results

