"""The typed result is the data analysis/ passes: bare-dict seams and ``dict[str, Any]`` stay under their budgets.

Both counts come from ``scripts/untyped_seams.py`` (``-v`` lists every site). A new module that passes JSON-shaped
dicts where a dataclass or TypedDict belongs fails here; the tests below also plant one to prove the count sees it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("untyped_seams", ROOT / "scripts" / "untyped_seams.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["untyped_seams"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_bare_dict_seams_stay_under_budget() -> None:
    seams = _script()
    found = seams.untyped()
    assert len(found) <= seams.SEAMS_BUDGET, "\n".join(found)


def test_dict_any_stays_under_budget() -> None:
    seams = _script()
    found = seams.dict_any_lines()
    assert len(found) <= seams.DICT_ANY_BUDGET, "\n".join(found)


def test_the_counts_see_a_planted_module(tmp_path, monkeypatch) -> None:
    seams = _script()
    pkg = tmp_path / "analysis"
    pkg.mkdir()
    (pkg / "planted.py").write_text(
        "from typing import Any\n\n\ndef facts(x: int) -> dict[str, Any]:\n    return {'x': x}\n\n\n"
        "def _private() -> dict:\n    return {}\n"
    )
    monkeypatch.setattr(seams, "ROOT", pkg)
    assert seams.untyped() == ["analysis/planted.py:4 facts -> dict[str, Any]"]
    assert seams.dict_any_lines() == ["analysis/planted.py:4 def facts(x: int) -> dict[str, Any]:"]
