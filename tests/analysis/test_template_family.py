"""Issue #39 class 4: a kernel is its full demangled name, template arguments included.

Planted on a real export (gaussian: Fan2 is 97.8% of the GPU time, one kernel): Fan2's launches are renamed into
several template instances that share the base name. Spread evenly over four instances, none dominates alone: KRN005
and the verdict say "one template family", and ncu is pointed at the costliest instance by its demangled name. With
one instance holding most of the launches, "one kernel" holds again and is that instance (its own time and share).
"""

from __future__ import annotations

from pathlib import Path

from analysis.api import analyze
from tests.analysis.planting import copy_export, ingest_copy, new_string, sqlite_rw
from tests.conftest import corpus_file

EXPORT = "gaussian-threadsync.sqlite"


def _instances(src: Path, out: Path, pick) -> dict:
    """Rename each Fan2 launch (by its rank in time) into instance ``pick(i)`` of a template ``Fan2<N>``."""
    path = copy_export(corpus_file(EXPORT), src)
    con = sqlite_rw(path)
    with con:
        ids = [r[0] for r in con.execute("""SELECT k.rowid FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                                            ON s.id = k.shortName WHERE s.value = 'Fan2' ORDER BY k.start""")]
        names = {n: new_string(con, f"void Fan2<{n}>(float *, float *, float *, int, int, int)") for n in range(4)}
        for i, rowid in enumerate(ids):
            con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = ? WHERE rowid = ?",
                        [names[pick(i)], rowid])
    con.close()
    return analyze([ingest_copy(path, out)]).to_json()


def test_a_template_family_is_not_one_kernel(tmp_path) -> None:
    result = _instances(tmp_path / "a.sqlite", tmp_path / "a.duckdb", lambda i: i % 4)
    (f,) = [x for x in result["findings"] if x["rule_id"] == "KRN005"]
    assert f["is_family"] and f["instances"] == 4 and f["kernel"] == "Fan2"
    assert 20 < f["instance_share_pct"] < 30 and f["share_pct"] > 90
    assert f["title"].startswith("One template family is") and "4 instances" in f["title"]
    assert f["instance"].startswith("void Fan2<") and "--kernel-name-base demangled" in f["ncu_command"]
    assert "Fan2<" in f["ncu_command"]
    v = result["verdict"]
    assert v["kind"] == "gpu_bound_kernel" and v["text"].startswith("One template family is"), v
    assert "costliest instance" in v["next_step"] and v["impact_ns"] == f["impact_ns"]


def test_one_dominant_instance_is_one_kernel(tmp_path) -> None:
    result = _instances(tmp_path / "b.sqlite", tmp_path / "b.duckdb", lambda i: 0 if i % 10 else 1 + i % 3)
    (f,) = [x for x in result["findings"] if x["rule_id"] == "KRN005"]
    assert not f["is_family"] and f["instances"] == 4 and f["instance_share_pct"] > 50
    # The kernel is the dominant instance, with its own time and share, and ncu profiles that instance.
    assert f["kernel"] == f["instance"] == "void Fan2<0>(float *, float *, float *, int, int, int)"
    assert f["share_pct"] == f["instance_share_pct"] < 90
    assert f["title"].startswith("One kernel is") and "--kernel-name-base demangled" in f["ncu_command"]
    assert result["verdict"]["text"].startswith("One kernel is") and "Fan2<0>" in result["verdict"]["text"]
