"""Count the functions of ``analysis/`` that return bare JSON (``dict``, ``dict[str, Any]``, ``Any``, or a
list/tuple/optional of them) across a module seam: public (no leading underscore) module-level functions
and methods of public classes.

    .venv/bin/python scripts/untyped_seams.py [-v]
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "analysis"
BARE = re.compile(r"^(?:(?:list|tuple|Sequence|Iterator)\[)?(?:dict(?:\[str, Any\])?|Any)(?:, \.\.\.)?\]?(?: \| None)?$")


def untyped() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        scopes: list[tuple[str, ast.AST]] = [("", tree)]
        scopes += [(f"{n.name}.", n) for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]
        for prefix, scope in scopes:
            for node in getattr(scope, "body", []):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
                    continue
                ret = ast.unparse(node.returns) if node.returns is not None else "Any"
                if BARE.match(ret):
                    out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {prefix}{node.name} -> {ret}")
    return out


if __name__ == "__main__":
    found = untyped()
    if "-v" in sys.argv:
        print("\n".join(found))
    print(f"{len(found)} functions in analysis/ return bare dict/Any across a module seam")
