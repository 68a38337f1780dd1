"""Rules build their finding's ``extra`` as the typed ``*Extra`` dataclasses of ``analysis.results`` (``Finding.extra``,
written into the JSON by ``extra_json``), not as dict literals: the JSON keeps the keys in the type's order, and a rule whose type exists but that still
writes a dict is seen here. Every rule declares its type (``Rule.extra_type``; none is exempt, the NET rules' too); its
findings carry no key the type (or the engine's ``EngineExtra``) lacks; every ``*Extra`` type is some rule's or the
engine's."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import sys
import typing

import pytest

from analysis import results
from analysis.api import analyze
from analysis.diagnosis import nccl
from analysis.diagnosis.findings import ENGINE_FIELDS, Finding
from analysis.diagnosis.rules.base import Rule
from analysis.diagnosis.rules.registry import default_registry, finding_extras
from analysis.readers.nccl import ingest, load
from analysis.results import (
    DominantKernelExtra,
    EngineExtra,
    MemsetExtra,
    NetExtra,
    NetFacts,
    SyncExtra,
    WarmupExtra,
    extra_json,
)
from tests.analysis.planting import ingested
from tests.conftest import corpus_dir, corpus_file


def test_extra_json_is_the_fields_in_declared_order() -> None:
    assert list(extra_json(WarmupExtra(steady_median_ns=7, warmup_iterations=3))) == ["warmup_iterations",
                                                                                       "steady_median_ns"]
    assert extra_json(MemsetExtra(memsets=2)) == {"memsets": 2}
    with pytest.raises(TypeError):
        extra_json({"memsets": 2})
    with pytest.raises(TypeError):
        extra_json(MemsetExtra)


def all_rules() -> list[type[Rule]]:
    """Every rule whose findings a result holds: the registry's (nsys, ncu) and the NET rules (an NCCL log's)."""
    return [*default_registry(), *nccl.registry()]


def extra_type_problems(rules: list[type[Rule]]) -> list[str]:
    """A rule that declares no ``extra_type``, or one that is not a typed extra of ``analysis.results``."""
    problems = []
    for r in rules:
        cls = r.extra_type
        if cls is None:
            problems.append(f"{r.id} declares no extra_type")
        elif not (dataclasses.is_dataclass(cls) and cls.__module__ == results.__name__ and cls.__name__.endswith("Extra")):
            problems.append(f"{r.id}: extra_type {cls!r} is no *Extra dataclass of analysis.results")
    return problems


def test_every_rule_declares_an_extra_type() -> None:
    """No rule is exempt: 25 nsys, 10 ncu, 7 NET rules, each with its typed extra."""
    rules = all_rules()
    assert len(rules) == 42 and extra_type_problems(rules) == []
    assert set(finding_extras()) == {r.id for r in rules}


def test_the_extra_type_check_fails_on_a_rule_without_one() -> None:
    class Open(Rule):
        id, name = "GPU098", "gpu.open"

    class Untyped(Rule):
        id, name, extra_type = "GPU099", "gpu.untyped", dict

    assert extra_type_problems([Open, Untyped]) == [
        "GPU098 declares no extra_type", "GPU099: extra_type <class 'dict'> is no *Extra dataclass of analysis.results"]


def test_every_extra_type_is_a_rule_s_or_the_engine_s() -> None:
    """No ``*Extra`` type of ``analysis.results`` is unused: each is a rule's ``extra_type`` or ``EngineExtra`` (the
    keys the engine adds, typed on every finding by the schema)."""
    declared = {cls.__name__ for cls in finding_extras().values()} | {EngineExtra.__name__}
    defined = {name for name, obj in vars(results).items()
               if name.endswith("Extra") and isinstance(obj, type) and obj.__module__ == results.__name__}
    assert defined == declared


def _sources(rule: type[Rule]) -> list[str]:
    """The source of the modules of a rule and its bases, and of the analysis modules the rule's module imports from
    (COMM005's findings are built by ``run_nodes.late_node``)."""
    modules = [sys.modules[base.__module__] for base in rule.__mro__ if base.__module__.startswith("analysis.")]
    tree = ast.parse(inspect.getsource(modules[0]))
    modules += [importlib.import_module(n.module) for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("analysis.diagnosis.")]
    return [inspect.getsource(m) for m in modules]


def test_every_rule_constructs_its_typed_extra() -> None:
    """In its own class, a base it shares or a module it calls (the ncu rules build ``NcuExtra`` in ``NcuRule``, and the
    gain sharing rebuilds it with its keys: ``ncu_gains.share_gains``; the NET rules ``NetExtra`` in
    ``NetRule.finding``; COMM005 in ``run_nodes.late_node``)."""
    dicts = sorted(r.id for r in all_rules()
                   if r.extra_type is None or not any(r.extra_type.__name__ in built(src) for src in _sources(r)))
    assert dicts == []


def built(source: str) -> set[str]:
    """The names code calls (``SyncExtra(...)``) or hands a builder as its first argument (``claimed(JitExtra, c)``)."""
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
    return ({n.func.id for n in calls if isinstance(n.func, ast.Name)}
            | {n.args[0].id for n in calls if n.args and isinstance(n.args[0], ast.Name)})


def test_a_type_declared_but_not_built_is_seen() -> None:
    assert {"SyncExtra", "JitExtra"} <= built("x = extra_json(SyncExtra(a=1))\ny = claimed(JitExtra, c)\n")
    assert "SyncExtra" not in built("extra_type = SyncExtra\nextra = {'sync_calls': 1}\n")


def test_a_rule_s_extra_on_a_real_export_is_its_type() -> None:
    """KRN005 on a corpus export: the finding's extra keys are DominantKernelExtra's fields, in order, and its values
    build the type back."""
    result = analyze([ingested(corpus_file("vecadd-2026.sqlite"))], rules=["KRN005"])
    (finding,) = result.findings
    fields = [f.name for f in dataclasses.fields(DominantKernelExtra)]
    typed = [k for k in finding.extra if k in fields]
    assert typed == fields
    assert extra_json(DominantKernelExtra(**{k: finding.extra[k] for k in fields})) == {k: finding.extra[k]
                                                                                        for k in fields}


# Inputs whose findings cover every rule the corpus shows (KRN002, MEM003 and COMM005 fire on none): nsys exports, a
# two-rank run (COMM001 with the run-level step's waiting), ncu reports, and every NCCL log (the NET rules).
EXPORTS = ["torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", "clue-um-t4.sqlite", "saxpy-mpi-rank0-perlmutter.sqlite",
           "vecadd-2026.sqlite", "cupy-a100.sqlite", "numba-copy-blocked-full.csv", "conv2d-result-rules.csv"]
TWO_RANKS = ["nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"]
COVERED = {"COMM001", "COMM002", "COMM003", "COMM004", "GPU001", "GPU002", "HOST001", "HOST002", "HOST003", "HOST004",
           "KRN001", "KRN003", "KRN004", "KRN005", "MEM001", "MEM002", "MEM004", "MEM005", "MEM006", "PHASE001",
           "PHASE002", "SYNC001", "NCU001", "NCU002", "NCU005", "NCU006", "NCU007", "NCU010", *(f"NET00{i}" for i in
                                                                                               range(1, 8))}


def undeclared(findings: list, extras: dict[str, type]) -> set[tuple[str, str]]:
    """(rule id, key) for each key of a finding's extra that neither its rule's ``extra_type`` nor ``EngineExtra``
    declares (a rule without a type: every key)."""
    engine = {f.name for f in dataclasses.fields(EngineExtra)}
    return {(f.rule_id, key) for f in findings for key in f.extra
            if key not in engine and (f.rule_id not in extras
                                      or key not in {x.name for x in dataclasses.fields(extras[f.rule_id])})}


@pytest.fixture(scope="module")
def typed_findings(tmp_path_factory) -> list:
    found = [f for name in EXPORTS for f in analyze([ingested(corpus_file(name))]).findings]
    found += analyze([ingested(corpus_file(name)) for name in TWO_RANKS]).findings
    for i, log in enumerate(sorted((corpus_dir() / "nccl").glob("*.log"))):
        db = tmp_path_factory.mktemp("nccl") / f"{i}.duckdb"
        ingest(log, db)
        found += [results.FindingResult.from_json(f.to_dict()) for f in nccl.findings(load(db))]  # as a result
    return found


def test_a_rule_s_findings_carry_only_the_keys_its_type_declares(typed_findings) -> None:
    assert {f.rule_id for f in typed_findings} == COVERED
    assert undeclared(typed_findings, finding_extras()) == set()


def _comm001(**engine) -> Finding:
    extra = results.CommOverlapExtra(comm_ns=100, comm_exposed_ns=80, overlap_pct=20.0, has_compute=False)
    return Finding(rule_id="COMM001", title="t", message="m.", impact_ns=80, impact_pct=8.0004, advice="a",
                   report="r0", rank=0, phase="steady", extra=extra, **engine)


def test_the_run_step_sets_its_keys_on_the_rule_s_extra() -> None:
    """COMM001's collective waiting (``waiting_apart``) is set on its ``CommOverlapExtra``, a field the rule's type
    declares (mypy checks the name): the impact loses the waiting, and the JSON writes the run step's keys after the
    engine's, where the run step has always added them; a finding read back from its JSON (step 1 saved, step 2
    read) writes the same JSON."""
    from analysis.run.facts import finding_from_json, finding_json
    from analysis.run.waiting import waiting_apart

    found = [_comm001(impact_per_step_ns=8, steps_in_window=10, loops=(0,))]
    split = {"per_rank": [{"rank": 0, "host": "h", "pid": 1, "wait_ns": 30, "transfer_ns": 5, "wait_pct": 85.0}],
             "participants": [{"rank": "rank 0", "host": "h", "wait_ns": 30, "transfer_ns": 5,
                               "waited_for": {"rank 1": 30}}]}
    waiting_apart([("r0", 0, "h", found)], split)
    (f,) = found
    assert isinstance(f.extra, results.CommOverlapExtra)
    assert (f.impact_ns, f.extra.waiting_ns, f.extra.exposed_with_waiting_ns) == (50, 30, 80)
    assert f.impact_pct == round(8.0 * 50 / 80, 3) and "waiting for rank 1" in f.message
    out = f.to_dict()
    assert list(out)[12:] == ["comm_ns", "comm_exposed_ns", "overlap_pct", "has_compute", "impact_per_step_ns",
                              "steps_in_window", "loops", "waiting_ns", "exposed_with_waiting_ns"]
    back = finding_from_json(finding_json(f))
    assert back == f and list(back.to_dict().items()) == list(out.items())
    # With compute beside the NCCL kernels the waiting may be hidden: the impact stays, the bound is said, last.
    hidden = [dataclasses.replace(_comm001(), extra=dataclasses.replace(_comm001().extra, has_compute=True))]
    waiting_apart([("r0", 0, "h", hidden)], split)
    assert hidden[0].impact_ns == 80 and list(hidden[0].to_dict().items())[-1] == ("waiting_up_to_ns", 30)


def test_a_finding_read_back_keeps_the_roll_up_and_refuses_a_key_no_type_has() -> None:
    """The roll-up across ranks (``RollUp``) is written last and read back whole; a key neither the finding nor its
    rule's type holds is an error, not a key silently kept or lost."""
    from analysis.diagnosis.findings import RollUp
    from analysis.run.facts import finding_from_json, finding_json

    rolled = _comm001(rollup=RollUp(impact_summed_ns=160, impact_basis="gpu_time_summed_over_ranks",
                                    per_rank=[], per_host=[], ranks_with_finding=2))
    out = finding_json(rolled)
    assert list(out)[-5:] == ["impact_summed_ns", "impact_basis", "per_rank", "per_host", "ranks_with_finding"]
    back = finding_from_json(out)
    assert back.rollup == rolled.rollup and list(back.to_dict().items()) == list(out.items())
    with pytest.raises(ValueError, match="sync_calls"):
        finding_from_json({**out, "sync_calls": 1})


def test_a_key_the_type_lacks_is_seen(typed_findings) -> None:
    """The check above can fail: a SYNC001 finding given one key more than ``SyncExtra`` declares is reported."""
    sync = next(f for f in typed_findings if f.rule_id == "SYNC001")
    assert "sync_calls" in {x.name for x in dataclasses.fields(SyncExtra)}
    planted = dataclasses.replace(sync, extra={**sync.extra, "sync_calls_total": 1})
    assert undeclared([planted], finding_extras()) == {("SYNC001", "sync_calls_total")}
    # A rule the table does not type has every key undeclared.
    assert ("SYNC001", "sync_calls") in undeclared([sync], {})


def test_the_registry_lists_each_rule_s_declared_type() -> None:
    extras = finding_extras()
    assert extras["SYNC001"] is SyncExtra and extras["KRN005"] is DominantKernelExtra
    assert {extras[f"NET00{i}"] for i in range(1, 8)} == {NetExtra}
    assert all(dataclasses.is_dataclass(cls) for cls in extras.values())


def test_engine_extra_is_the_keys_the_engine_writes() -> None:
    """``EngineExtra`` is never constructed (its docstring says why); its fields are exactly the engine's keys a
    ``Finding`` holds as its own fields (``ENGINE_FIELDS``: the runner's host-paced mark and cost per step, the
    sampling rules' ``host_functions``; ``loops``; the roll-up's, ``RollUp``) and ``owns_idle``, which HOST002's type
    declares: a key added to a finding without the type, or a field no finding holds any more, fails here."""
    from analysis.diagnosis.findings import RollUp

    held = {f.name for f in dataclasses.fields(Finding)}
    rollup = {f.name for f in dataclasses.fields(RollUp)}
    assert set(ENGINE_FIELDS) | {"loops", "rollup"} <= held
    assert all(any("host_functions=" in src for src in _sources(default_registry().get(r)))
               for r in ("SYNC001", "GPU001", "HOST001"))
    assert "owns_idle" in {f.name for f in dataclasses.fields(finding_extras()["HOST002"])}
    assert {f.name for f in dataclasses.fields(EngineExtra)} == {*ENGINE_FIELDS, "loops", *rollup, "owns_idle"}


def facts_problems(findings: list) -> set[tuple[str, tuple[str, ...]]]:
    """(rule id, keys) for each NET finding whose ``nccl`` part is not exactly one of the ``Net*Facts`` shapes."""
    shapes = [set(t.__required_keys__ | t.__optional_keys__) for t in typing.get_args(NetFacts)]
    return {(f.rule_id, tuple(f.extra["nccl"])) for f in findings
            if f.rule_id.startswith("NET") and "nccl" in f.extra and set(f.extra["nccl"]) not in shapes}


def test_a_net_finding_s_facts_are_one_closed_shape(typed_findings) -> None:
    """``NetExtra.nccl`` is typed: on every corpus log the NET rules' ``nccl`` parts are each one ``Net*Facts`` shape,
    whole; seven of the nine shapes show on the corpus (NET004's PCIe path and channel count only on planted logs)."""
    net = [f for f in typed_findings if f.rule_id.startswith("NET") and "nccl" in f.extra]
    assert facts_problems(net) == set()
    assert len({frozenset(f.extra["nccl"]) for f in net}) == 7
    planted = dataclasses.replace(net[0], extra={**net[0].extra, "nccl": {**net[0].extra["nccl"], "more": 1}})
    assert facts_problems([planted]) == {(planted.rule_id, (*net[0].extra["nccl"], "more"))}
