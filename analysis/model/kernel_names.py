"""Readable kernel and NVTX names: C++ templates and argument lists folded, volatile counters in NVTX text folded."""

from __future__ import annotations

import re

# NVTX text that carries a per-call counter (PyTorch's "op_id = 12", "seq = 7", NCCL's "Sequence: 3"): folded so
# the ranges of one operation add up in one row.
VOLATILE_NVTX = r"\b(op_id|seq|Sequence)(\s*[=:]\s*)\d+"
VOLATILE_NVTX_SQL = (f"regexp_replace(coalesce(text, ''), '{VOLATILE_NVTX}', '\\1\\2N', 'g')")


def _fold(text: str, open_: str, close: str, keep: str) -> str:
    """Replace each outermost ``open_ ... close`` by ``keep`` (nesting counted)."""
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            if depth == 0:
                out.append(keep)
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_kernel_name(name: str, limit: int = 90) -> str:
    """``void at::native::elementwise_kernel<128, 4, …>(int, …)`` -> ``at::native::elementwise_kernel<…>``."""
    text = (name or "").strip()
    if not text:
        return ""
    text = _fold(text, "<", ">", "<…>")
    text = _fold(text, "(", ")", "()")
    text = _fold(text, "[", "]", "[…]")   # Numba's mangled specialisations
    text = re.sub(r"^(void|static|__global__)\s+", "", text)
    text = text.replace("()", "", 1) if text.endswith("()") else text
    return text if len(text) <= limit else text[: limit - 1] + "…"
