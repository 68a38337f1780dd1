"""Issue #39 class 3: premises as part of the rule contract (docs/rules.md).

KRN004 (launch shape) may lead the verdict only when the kernel's duration grows as its grid shrinks. Planted on a
real export whose verdict is the launch shape (a30-mig: nussinov_gpu, one block on a 28-SM slice): the same kernel
launched again with a grid of 120 blocks and the same duration. Then the grid is shown not to limit it: KRN004 says
so ("grid 1-120 blocks, duration flat: not grid-bound"), and the verdict does not lead with the launch shape. With
the wide launch 100 times faster, the premise holds and the launch shape leads again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.api import analyze
from tests.analysis.planting import clone_row, copy_export, ingest_copy, sqlite_rw
from tests.conftest import corpus_file

EXPORT = "a30-mig.sqlite"


def _wide_launch(path: Path, speedup: float) -> None:
    """A second launch of the export's kernel, 120 blocks wide, right after the first; ``speedup``: how many times
    faster it runs than the 1-block launch."""
    con = sqlite_rw(path)
    with con:
        rowid, start, end = con.execute('SELECT rowid, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
        dur = int((end - start) / speedup)
        clone_row(con, "CUPTI_ACTIVITY_KIND_KERNEL", rowid, start=end + 1000, end=end + 1000 + dur, gridX=120)
    con.close()


@pytest.mark.parametrize(("speedup", "holds"), [(1.0, False), (100.0, True)], ids=["flat", "grid-bound"])
def test_the_launch_shape_leads_only_when_its_premise_holds(tmp_path, speedup, holds) -> None:
    src = copy_export(corpus_file(EXPORT), tmp_path / "a.sqlite")
    _wide_launch(src, speedup)
    result = analyze([ingest_copy(src, tmp_path / "a.duckdb")]).to_json()
    (f,) = [x for x in result["findings"] if x["rule_id"] == "KRN004"]
    assert f["premise_holds"] is holds and f["premise"].startswith("grid 1-120 blocks"), f["premise"]
    v = result["verdict"]
    if holds:
        assert "the grid limits it" in f["premise"] and v["kind"] == "launch_shape", v
    else:
        assert "duration flat" in f["premise"] and "not grid-bound" in f["title"]
        assert v["kind"] != "launch_shape" and v["rule_id"] != "KRN004", v


def test_one_grid_size_says_what_the_premise_rests_on() -> None:
    from tests.analysis.test_verdict_substance import _result
    (f,) = [x for x in _result(EXPORT)["findings"] if x["rule_id"] == "KRN004"]
    assert f["premise_holds"] is True and f["premise"].startswith("one grid size")
    assert "Premise (the kernel's duration grows as its grid shrinks): holds" in f["message"]
