"""The unused-code check of ``make lint`` (scripts/unused_code.py, vulture): the packages pass it, it reports a
planted dead function and import but not a route or an unused variable, and its whitelist names real code."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "scripts" / "unused_code.py"


def _check(*paths: str) -> subprocess.CompletedProcess:
    # From the root, so that vulture reads pyproject's [tool.vulture]; paths given replace its paths.
    return subprocess.run([sys.executable, str(CHECK), *paths], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_the_packages_have_no_unused_functions_classes_methods_or_imports() -> None:
    out = _check()
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_dead_function_and_import_are_reported_a_route_and_a_variable_are_not(tmp_path) -> None:
    (tmp_path / "mod.py").write_text(
        "import json\n"
        "from flask import Blueprint\n"
        "bp = Blueprint('x', __name__)\n"
        "UNREAD = 1\n\n"
        "def never_called():\n    return 1\n\n"
        "@bp.route('/page')\n"
        "def page():\n    return 'ok'\n\n"
        "class Thing:\n    def unused_method(self):\n        return 2\n")
    out = _check(str(tmp_path))
    assert out.returncode == 3, out.stdout + out.stderr
    reported = {line.split(": unused ")[1].split(" (")[0] for line in out.stdout.splitlines()}
    assert reported == {"import 'json'", "function 'never_called'", "class 'Thing'", "method 'unused_method'"}


def test_every_whitelisted_entry_point_exists() -> None:
    names = runpy.run_path(str(ROOT / "scripts" / "vulture_whitelist.py"))
    assert names["ENTRY_POINTS"] and all(callable(e) for e in names["ENTRY_POINTS"])
