"""The import-linter contracts hold, and the facade contract really catches an import past ``analysis.api``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("analysis", "app", "workers", "goodput_cli")
CONTRACT = "app and workers import only analysis.api and analysis.errors"


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def _copy(tmp: Path) -> Path:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def test_the_contracts_hold() -> None:
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{CONTRACT} (the library's one door) KEPT" in " ".join(out.stdout.split())


def test_an_import_past_the_facade_breaks_the_contract(tmp_path) -> None:
    root = _copy(tmp_path)
    assert _lint(root).returncode == 0  # the copy as it is
    with (root / "app/services/pages/web_run.py").open("a") as fh:
        fh.write("\nfrom analysis.model.trace import Trace  # noqa\n")
    with (root / "workers/tasks.py").open("a") as fh:
        fh.write("\n\ndef _probe():\n    from analysis.views import timeline  # noqa\n")
    out = _lint(root)
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, text
    assert f"{CONTRACT} (the library's one door) BROKEN" in text
    assert "app.services.pages.web_run -> analysis.model.trace" in text and "workers.tasks -> analysis.views.timeline" in text


def test_an_import_circle_breaks_the_acyclic_contract(tmp_path) -> None:
    root = _copy(tmp_path)
    # A lazy import counts as much as a top-level one: the circle is in the graph either way.
    with (root / "app/services/jobs/leases.py").open("a") as fh:
        fh.write("\n\ndef _probe():\n    from app.services.jobs import jobstate  # noqa\n")
    with (root / "goodput_cli/upload.py").open("a") as fh:
        fh.write("\n\ndef _probe():\n    from goodput_cli import main  # noqa\n")
    text = " ".join(_lint(root).stdout.split())
    assert "no import circles anywhere BROKEN" in text
    assert "No cycles are allowed in app.services" in text and "No cycles are allowed in goodput_cli" in text


def test_an_import_up_the_pipeline_breaks_the_layers_contract(tmp_path) -> None:
    root = _copy(tmp_path)
    # A reader reaching into the diagnosis, and a loop helper into the run: both point up the pipeline.
    with (root / "analysis/readers/nsys/normalize.py").open("a") as fh:
        fh.write("\n\ndef _probe():\n    from analysis.diagnosis import verdict  # noqa\n")
    with (root / "analysis/loops/window.py").open("a") as fh:
        fh.write("\n\ndef _probe():\n    from analysis.run import rollup  # noqa\n")
    text = " ".join(_lint(root).stdout.split())
    assert "analysis follows its pipeline" in text and "BROKEN" in text
    assert "analysis.readers.nsys.normalize -> analysis.diagnosis.verdict" in text
    assert "analysis.loops.window -> analysis.run.rollup" in text


def import_cycles(imports: dict[str, set[str]]) -> list[set[str]]:
    """The import circles of a graph (module -> the modules it imports): its strongly connected components of
    more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(imports.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(imports):
        if v not in index:
            visit(v)
    return out


def test_import_cycles_finds_a_circle_through_a_package() -> None:
    """A module importing its own package (which imports the module back) is a circle, as the rules' idle claims
    once were: ``acyclic_siblings`` compares siblings only and does not see it."""
    graph = {"p": {"p.a", "p.b"}, "p.a": {"p.c"}, "p.b": set(), "p.c": {"p"}}
    assert import_cycles(graph) == [{"p", "p.a", "p.c"}]
    graph["p.c"] = {"p.b"}
    assert import_cycles(graph) == []


def test_no_module_of_the_library_imports_in_a_circle() -> None:
    """The library's whole import graph, imports inside functions included (grimp reads every import statement),
    has no circle: not between siblings, nor through a parent package."""
    import grimp

    g = grimp.build_graph("analysis")
    graph = {m: set(g.find_modules_directly_imported_by(m)) & g.modules for m in g.modules}
    assert g.direct_import_exists(importer="analysis.diagnosis.ncu.sol", imported="analysis.diagnosis.ncu.memory")
    assert import_cycles(graph) == []
