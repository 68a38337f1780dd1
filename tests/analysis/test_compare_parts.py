"""The comparison's parts on plain data: the Mann-Whitney test (against its definition), the noise floor and
its fallback, kernel labels that keep instantiations apart, and findings matched by rule and scope."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from analysis.views.compare_findings import match_findings
from analysis.views.compare_kernels import distinct_labels
from analysis.views.significance import compare_samples, mann_whitney_p, smallest_p


def _p_by_definition(x, y) -> float:
    """U counted pair by pair (ties count one half), tie-corrected variance, continuity correction."""
    u = sum((a > b) + 0.5 * (a == b) for a, b in itertools.product(x, y))
    n1, n2 = len(x), len(y)
    n = n1 + n2
    _, counts = np.unique(np.concatenate([x, y]), return_counts=True)
    var = n1 * n2 / 12.0 * ((n + 1) - float((counts**3 - counts).sum()) / (n * (n - 1)))
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / math.sqrt(var)
    return 1.0 if z <= 0 else math.erfc(z / math.sqrt(2.0))


@pytest.mark.parametrize("seed", range(6))
def test_mann_whitney_equals_its_definition_with_ties(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, size=rng.integers(3, 30))
    y = rng.integers(1, 7, size=rng.integers(3, 30))
    assert mann_whitney_p(x, y) == pytest.approx(_p_by_definition(x, y), rel=1e-12)
    assert mann_whitney_p(x, y) == pytest.approx(mann_whitney_p(y, x), rel=1e-12)  # two-sided


def test_textbook_value_and_degenerate_samples():
    # All of x below all of y, 8 against 8: U = 0, z = (32 - 0.5) / sqrt(8*8*17/12) = 3.309...
    x, y = np.arange(8), np.arange(100, 108)
    z = 31.5 / math.sqrt(64 * 17 / 12)
    assert mann_whitney_p(x, y) == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)
    assert mann_whitney_p(np.full(5, 3), np.full(7, 3)) == 1.0
    assert smallest_p(8, 8) == pytest.approx(mann_whitney_p(x, y), rel=1e-12)


def test_changed_needs_significance_and_the_floor():
    base = np.array([100.0, 101, 99, 100, 102, 98, 100, 101, 99, 100] * 5)
    shifted = base * 1.4
    out = compare_samples(base, shifted, floor_pct=5.0)
    assert out["changed"] and out["significant"] and out["delta_pct"] == pytest.approx(40.0)
    small = compare_samples(base, base * 1.02, floor_pct=5.0)
    assert small["significant"] and not small["changed"]  # a real but small shift: under the floor
    same = compare_samples(base, base[::-1].copy(), floor_pct=5.0)
    assert not same["significant"] and not same["changed"] and same["delta"] == 0


def test_one_sample_and_tiny_samples_fall_back_to_the_floor_and_say_so():
    one = compare_samples(np.array([100]), np.array([130, 131, 129]), floor_pct=5.0)
    assert one["test"] == "floor_only" and one["changed"] and "1 sample(s)" in one["note"]
    assert one["p_value"] is None
    tiny = compare_samples(np.array([100, 101]), np.array([103, 104]), floor_pct=5.0)
    assert tiny["test"] == "floor_only" and not tiny["changed"] and "too few" in tiny["note"]
    none = compare_samples(np.array([]), np.array([1, 2]), floor_pct=5.0)
    assert none["changed"] is False and none["note"] == "no samples on one side"


ELEMENTWISE = "void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<{}>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)"


def test_two_instantiations_read_differently_and_plain_names_stay_short():
    mul = ELEMENTWISE.format("at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>")
    add = ELEMENTWISE.format("at::native::CUDAFunctor_add<float>")
    labels = distinct_labels([mul, add, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"])
    assert labels[mul] != labels[add]
    assert labels[mul].startswith("at::native::elementwise_kernel<…> · ") and "BinaryFunctor" in labels[mul]
    assert "CUDAFunctor_add" in labels[add]
    assert labels["ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"] == "ncclDevKernel_SendRecv"
    # Names that differ only where no word does (the order of the same words) are numbered, still distinct.
    a, b = "k<(int)1, (int)2>(int)", "k<(int)2, (int)1>(int)"
    assert len(set(distinct_labels([a, b]).values())) == 2


def _f(rule, impact, title, rank=None, phase="steady", severity="info", **extra):
    return {"rule_id": rule, "impact_ns": impact, "title": title, "rank": rank, "phase": phase,
            "severity": severity, **extra}


def test_findings_match_by_rule_and_scope_not_by_title():
    base = [_f("MEM001", 26_656, "34 copies use pageable host memory"), _f("COMM002", 10_000, "x", severity="info"),
            _f("KRN003", 5, "a", dominant_kernel="k1"), _f("KRN003", 7, "b", dominant_kernel="k2")]
    head = [_f("MEM001", 30_000, "38 copies use pageable host memory"), _f("COMM002", 18_000, "y", severity="warning"),
            _f("KRN003", 9, "c", dominant_kernel="k2"), _f("GPU002", 1, "new one", rank=1)]
    out = match_findings(base, head)
    by = {(m["rule_id"], m["kernel"]): m for m in out["matched"]}
    assert by[("MEM001", None)]["impact_ns"]["delta"] == 30_000 - 26_656
    assert by[("COMM002", None)]["severity"] == {"base": "info", "head": "warning", "changed": True}
    assert by[("KRN003", "k2")]["impact_ns"] == {"base": 7, "head": 9, "delta": 2, "delta_pct": 28.571}
    assert [f["rule_id"] for f in out["new"]] == ["GPU002"]
    assert [(f["rule_id"], f["dominant_kernel"]) for f in out["resolved"]] == [("KRN003", "k1")]
    # The service's findings keep the rule's own fields under "extra": the same matching.
    service = [{**{k: v for k, v in f.items() if k != "dominant_kernel"}, "extra": {"dominant_kernel": f.get("dominant_kernel")}}
               for f in head]
    assert [(m["rule_id"], m["kernel"]) for m in match_findings(base, service)["matched"]] == list(by)


def test_a_rule_on_another_kernel_is_not_compared_but_says_so():
    base = [_f("KRN003", 5, "a", dominant_kernel="k1", phase="steady")]
    head = [_f("KRN003", 6, "b", dominant_kernel="k9", phase="all")]
    out = match_findings(base, head)
    assert out["matched"] == []  # two kernels: not one quantity (issue #41)
    (new,), (gone,) = out["new"], out["resolved"]
    assert new["other_scope"]["kernel"] == "k1" and gone["other_scope"]["kernel"] == "k9"
    # the same kernel in another phase still pairs
    (m,) = match_findings(base, [_f("KRN003", 6, "b", dominant_kernel="k1", phase="all")])["matched"]
    assert m["matched_on"] == "rule, rank, device and kernel" and m["impact_ns"]["delta"] == 1


def test_effect_is_the_planted_factor_when_the_mix_of_modes_changes():
    # A kernel that is short (100) or long (3000, it waited): 70/30 in A, 50/50 in B, and 1.4x slower in B.
    rng = np.random.default_rng(7)
    base = np.concatenate([rng.normal(100, 2, 700), rng.normal(3000, 40, 300)])
    head = 1.4 * np.concatenate([rng.normal(100, 2, 500), rng.normal(3000, 40, 500)])
    out = compare_samples(base, head, floor_pct=5.0)
    assert np.median(head) / np.median(base) > 10          # the ratio of the medians is meaningless here
    # Within the launches' own spread (2 % each, ~2.8 % on a ratio): the mix shifts which pairs sit mid-way.
    assert out["delta_pct"] == pytest.approx(40.0, abs=2.8) and out["changed"]
