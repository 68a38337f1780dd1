"""A windowed report's painting and GPU001's set-up cover read host rows from the stored tables, not through the
window's views (``Trace.stored``): every slice they fetch lies inside the window and is clipped by them. On every
corpus export, through a window cutting out the middle third of what it recorded (GPU work, CUDA calls, NVTX
ranges; so calls, ranges and gaps cross its edges), the anatomy and every nsys rule's findings are the same as
when read through the views."""

from __future__ import annotations

import pytest

from analysis.diagnosis.idle_anatomy import idle_anatomy
from analysis.diagnosis.rules.nsys import NSYS_RULES
from analysis.diagnosis.rules.registry import default_registry
from analysis.model.trace import Run, Trace
from tests.analysis.planting import ingested
from tests.analysis.rule_runner import run_rules
from tests.analysis.test_rules_corpus import IDS
from tests.conftest import NSYS_FILES


def _through(path, label: str, lo: int, hi: int) -> tuple[list, list]:
    t = Trace(path, label).windowed(lo, hi)
    try:
        anatomy = [e.to_json() for e in idle_anatomy(t)]
        found, results = run_rules(Run([t]), default_registry(), list(NSYS_RULES))
        return anatomy, [f.to_dict() for f in found] + [(r.rule_id, r.status) for r in results]
    finally:
        t.close()


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_stored_tables_read_as_the_windows_views(src, monkeypatch) -> None:
    path = ingested(src)
    whole = Trace(path, src.name)
    try:  # the span of what the report recorded (GPU work, CUDA calls, NVTX ranges)
        spans = [whole.sql(f"SELECT min(start_ns), max(end_ns) FROM {table}")[0]  # noqa: S608 - constants
                 for table in ("kernels", "memcpy", "memset", "cuda_api", "nvtx") if whole.has_rows(table)]
    finally:
        whole.close()
    # A report with no timed rows at all (a threads table only) still gets a window: it must paint nothing.
    lo, hi = min((s for s, _ in spans), default=0), max((e for _, e in spans if e is not None), default=3)
    third = (hi - lo) // 3
    stored = _through(path, src.name, lo + third, hi - third)
    monkeypatch.setattr(Trace, "stored", lambda self, table, lo=None, hi=None: f'"{table}"')
    viewed = _through(path, src.name, lo + third, hi - third)
    assert stored == viewed


def test_stored_names_the_view_outside_the_window(tmp_path) -> None:
    """A range reaching outside the window is read through the view (the stored table would add rows the window
    leaves out); without a window, or a table the window does not restrict, the name is the table's."""
    from tests.analysis.planting import kernel, normalized

    path = normalized(tmp_path / "r.duckdb", kernels=[kernel(0, 10), kernel(50, 60)])
    whole = Trace(path, "r")
    t = whole.windowed(20, 40)
    try:
        assert whole.stored("cuda_api", 0, 100) == '"cuda_api"'
        assert t.stored("cuda_api", 10, 30) == '"cuda_api"'
        assert t.stored("cuda_api", 25, 35).endswith('.main."cuda_api"')
        assert t.stored("devices") == '"devices"'
        assert t.scalar(f"SELECT count(*) FROM {t.stored('kernels')}") == 2  # noqa: S608 - a table name
        assert t.scalar("SELECT count(*) FROM kernels") == 0
    finally:
        t.close()
        whole.close()
