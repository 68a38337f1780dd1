"""Rules on a whole opened ``Run`` the way tests drive them: not the production path.

Production runs rules per report in ``analysis.run.runner`` (through ``analysis.api``): the report seen through
its analysis window, rules of scope ``run`` deferred to the run-level step over the reports' facts, a rule whose
input is absent ``missing`` (another report of the run may supply it), then the ncu gains shared and the
findings ranked. Tests of one rule or of the engine want less: ``run_rules`` calls the same engine loop
(``analysis.diagnosis.rules.base.evaluate``) once on a run they built, with thresholds resolved from overrides,
every selected rule run in place (run scope too), absent input reported ``skipped``, and the ncu gains shared
as the runner shares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from analysis.diagnosis.findings import Finding
from analysis.diagnosis.ncu_gains import share_gains
from analysis.diagnosis.rules.base import Registry, Rule, RuleContext, RuleResult, evaluate
from analysis.diagnosis.rules.registry import default_registry
from analysis.loops.window import WindowSpec
from analysis.model.trace import Run


def run_rules(
    run: Run, registry: Registry, selected: list[type[Rule]] | None = None,
    overrides: Mapping[str, float] | None = None, window: WindowSpec | None = None,
) -> tuple[list[Finding], list[RuleResult]]:
    """``evaluate`` with thresholds resolved from ``overrides``; a rule whose input is absent is reported
    ``skipped`` (on a whole run there is no other report that could supply it).

    ``window``: the spec the run's reports are already seen through, passed on to the rules."""
    all_params = {r.id: registry.resolve_params(r, overrides) for r in registry}
    chosen = selected if selected is not None else list(registry)
    for r in chosen:
        all_params.setdefault(r.id, registry.resolve_params(r, overrides))
    # The rules that own idle by category are the whole default registry's, as in the runner, whatever is chosen.
    base = RuleContext(run, all_params=all_params, window=window, claimers=default_registry().idle_claimers())
    findings, results = evaluate(run, chosen, base, all_params)
    # The findings on one ncu kernel share its time (causes before symptoms), as in the runner.
    return share_gains(findings), [replace(r, status="skipped") if r.status == "missing" else r for r in results]
