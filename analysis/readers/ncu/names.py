"""Kernel-name helpers: the short name of a demangled C++ signature, and ncu's "(x, y, z)" dimensions."""

from __future__ import annotations

import re

_DIMS = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def parse_dims(text: str) -> tuple[int, int, int] | None:
    """'(256, 1, 1)' -> (256, 1, 1); anything else -> None."""
    m = _DIMS.fullmatch(text.strip())
    if not m:
        return None
    dims = (int(m[1]), int(m[2]), int(m[3]))
    return dims if max(dims) <= 2**31 - 1 else None  # INTEGER columns; larger is not a real launch


def short_name(name: str) -> str:
    """The function's own name, as nsys stores it in ``shortName``.

    'void at::native::(anonymous namespace)::fused_dropout_kernel_vec<double, ...>(...)' ->
    'fused_dropout_kernel_vec'. Template arguments, the parameter list, the return type and the
    namespaces are dropped; ``(anonymous namespace)`` is a namespace, not a parameter list.
    """
    out: list[str] = []
    i, n = 0, len(name)
    while i < n:
        ch = name[i]
        if ch == "(" and name.startswith("(anonymous namespace)", i):
            i += len("(anonymous namespace)")
            continue
        if ch == "(" and out and "".join(out).rstrip().endswith("operator"):
            out.append("()")  # operator() is a name, not the parameter list
            i += 2
            continue
        if ch == "(":
            break
        if ch in "<[":
            depth, j = 0, i
            while j < n:
                if name[j] in "<[(":
                    depth += 1
                elif name[j] in ">])":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            i = j + 1
            continue
        out.append(ch)
        i += 1
    base = "".join(out).strip()
    base = base.split()[-1] if base.split() else name.strip()
    return base.rsplit("::", 1)[-1] or name.strip()
