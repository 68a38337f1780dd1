"""GPU001's gap causes read the idle painting's cover of CUDA and OS calls instead of fetching the calls again:
on every corpus export the painted cover of each long gap equals the calls' union fetched and measured apart
(``causes.coverage``), and the causes from either are the same."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.diagnosis.idle_anatomy import speakers
from analysis.diagnosis.rules.nsys.causes import _painted_cover, coverage, owned_gap_causes
from analysis.diagnosis.rules.nsys.gaps import owned, owner_code
from analysis.diagnosis.rules.nsys.idle_claims import LONG_GAP_NS, claims
from analysis.diagnosis.rules.registry import default_registry
from analysis.model.activity import unit_gaps
from analysis.model.trace import Trace
from tests.analysis.planting import ingested
from tests.analysis.test_rules_corpus import IDS
from tests.conftest import NSYS_FILES

GPU001 = owner_code(default_registry().get("GPU001"))
CLAIMERS = default_registry().idle_claimers()


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_painted_cover_equals_the_calls_union(src) -> None:
    trace = Trace(ingested(src), src.name)
    try:
        sp = speakers(trace)
        cl = claims(trace, CLAIMERS)
        checked = 0
        for ug, cov in zip(unit_gaps(trace), cl.cover, strict=True):
            pid, dev = ug.unit.pid, ug.unit.device
            long = (ug.gap_end - ug.gap_start) >= LONG_GAP_NS
            if cov is None:
                assert pid is None or not len(ug.gap_start)
                continue
            assert cov.shape == (int(long.sum()), 2)
            tids = sp.get((pid, dev))
            gs, ge = ug.gap_start[long], ug.gap_end[long]
            assert cov[:, 0].tolist() == coverage(trace, "cuda_api", pid, tids, gs, ge).tolist()
            assert cov[:, 1].tolist() == coverage(trace, "osrt", pid, tids, gs, ge).tolist()
            checked += len(gs)
        units = owned(trace, None, CLAIMERS)
        painted = owned_gap_causes(trace, units, GPU001, CLAIMERS, LONG_GAP_NS)
        fetched = owned_gap_causes(trace, units, GPU001, CLAIMERS)
        assert [(p.pid, p.cause.tolist()) for p in painted] == [(p.pid, p.cause.tolist()) for p in fetched]
        if checked:  # the painting is what GPU001 read
            assert _painted_cover(trace, units, GPU001, CLAIMERS, LONG_GAP_NS) is not None
    finally:
        trace.close()


def test_cover_counts_time_under_more_specific_categories() -> None:
    """The cover is of the calls themselves: an OS call under a CUDA call still covers (the painting gives the
    instant to the CUDA call's category)."""
    from analysis.diagnosis.idle_anatomy import Painted, paint_intervals

    out = Painted(1)
    out.long = np.array([True])
    out.cover_pieces = np.array([0], dtype=np.int64)
    out.cover = np.zeros((1, 2), dtype=np.int64)
    s, e = np.array([0, 10], dtype=np.int64), np.array([20, 60], dtype=np.int64)
    cat = np.array([1, 9], dtype=np.uint8)
    paint_intervals(np.array([0], dtype=np.int64), np.array([100], dtype=np.int64), s, e, cat,
                    np.array([1, 2], dtype=np.uint64), np.array([], dtype=np.int64), out,
                    src=np.array([1, 2], dtype=np.uint8))
    assert out.cover.tolist() == [[20, 50]]
    assert int(out.ns.sum()) == 100
