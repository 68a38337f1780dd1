"""Every count a person reads has its thousands separated ("1,230 of 4,096 iterations", never "1230 of 4096"):
the findings' titles and messages, the verdicts, the run's notes and the CLI's text output on corpus inputs, and
no f-string in the code that writes them puts a count in bare (issue #42 point 1)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from analysis.api import analyze
from goodput_cli.render import text
from tests.analysis.planting import ingested
from tests.conftest import corpus_dir, corpus_file

ROOT = Path(__file__).resolve().parents[2]

# A whole number of four or more digits without separators, standing alone: not part of a name ("sgemm_128x1024",
# "vecadd-2026"), a date or time ("2026-12-06", "03:14"), a decimal, a setting ("NCCL_BUFFSIZE=8388608") or a hex id.
_BARE = re.compile(r"(?<![\w.,:/#=+'\"@-])(\d{4,})(?![\w.,:/'\"-])")
# Identifiers, not counts: "pid 12345", "rank 1024", "line 2048", "collective #1500", "slow step 1203".
_ID_BEFORE = re.compile(r"\b(?:pids?|tids?|ranks?|devices?|lines?|ports?|step|instance|collective|loop|iteration|"
                        r"stream|context|node|version|NCCL|CUDA|compute capability)\s$", re.I)


def unseparated_counts(text_: str, quoted: bytes = b"") -> list[str]:
    """The bare numbers of four or more digits in ``text_`` that are not identifiers and not quoted from the
    input (``quoted``: the raw export, whose own strings, "RTX 4060" or ncu's rule texts, Goodput repeats as
    given)."""
    out = []
    for m in _BARE.finditer(text_):
        if _ID_BEFORE.search(text_[max(0, m.start() - 24):m.start()]):
            continue
        words = re.search(r"\S*\s?" + m.group(1) + r"\s?\S*", text_[max(0, m.start() - 40):m.end() + 40])
        if quoted and words and words.group(0).encode() in quoted:
            continue
        out.append(text_[max(0, m.start() - 40):m.end() + 20])
    return out


def test_the_scanner_finds_bare_counts_and_leaves_ids_and_names() -> None:
    for bad in ("arrives last at 1230 of 4096 skewed collectives", "the 1024 ranks of host a", "(1500 found; valid)",
                "NVTX shows 2048 iterations", "merged from 1001 logs", "Blocks of 1024 threads"):
        assert unseparated_counts(bad), bad
    good = ("1,230 of 4,096 iterations; pid 12345, tid 4711, rank 1024, device 0; sgemm_128x1024; vecadd-2026.sqlite; "
            "2026-12-06 03:14; 1.23 GB; NCCL_BUFFSIZE=8388608; collective #1500; line 2048; 0x7f3a; 999 calls")
    assert unseparated_counts(good) == []
    assert unseparated_counts("on an NVIDIA GeForce RTX 4060 Laptop GPU", b"..NVIDIA GeForce RTX 4060 Laptop GPU..") == []


def _texts(result: dict[str, Any]) -> list[str]:
    """What a person reads of a result besides the CLI's text: finding titles, messages and advice, verdicts,
    the window's label and the run's notes."""
    out = [t for f in result.get("findings") or [] for t in (f.get("title"), f.get("message"), f.get("advice"))]
    verdicts = [result.get("verdict")] + [r.get("verdict") for r in result.get("reports") or []]
    out += [t for v in verdicts if isinstance(v, dict) for t in (v.get("text"), v.get("next_step"))]
    out += [w.get("message") for w in result.get("warnings") or [] if isinstance(w, dict)]
    out += [r.get("reason") for r in result.get("rules") or [] if isinstance(r, dict)]
    return [t for t in out if isinstance(t, str)]


# One input of each kind whose texts carry the most counts: a two-rank NCCL run (run notes, collectives across
# ranks), exports with thousands of syncs, copies and launches, an ncu CSV, an NCCL log.
INPUTS = (
    ("nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"),
    ("devsync-heavy-report13.sqlite",),
    ("cupy-power-iteration.sqlite",),
    ("unified-memory-a100.sqlite",),
    ("numba-copy-blocked-full.csv",),
    ("corigpu-2x8-v100-ib-9nic-wcerr12-2.4.log",),
)


@pytest.mark.parametrize("names", INPUTS, ids=lambda n: n[0].rsplit(".", 1)[0])
def test_no_bare_count_in_what_the_analysis_says(names: tuple[str, ...]) -> None:
    files = [corpus_file(n) if not n.endswith(".log") else next((corpus_dir() / "nccl").glob(f"*{n}")) for n in names]
    result = analyze([ingested(f) for f in files], labels=[f.name for f in files]).to_json()
    quoted = b"".join(f.read_bytes() for f in files)
    found = {t: bad for t in _texts(result) + text(result).splitlines() if (bad := unseparated_counts(t, quoted))}
    assert not found, found


_COUNTISH = re.compile(r"\blen\(|\bcount\b|'count'|_count\b|(?<!')\bn_[a-z]+\b(?!')|\binstances\b|'n'\]")
_MACHINE = re.compile(r"SELECT|FROM |CREATE |Content-Length|least\(|::")


def _is_word(expr: ast.expr) -> bool:
    """``'s' if len(x) > 1 else ''``: a plural ending chosen by a count, not the count."""
    return isinstance(expr, ast.IfExp) and all(isinstance(b, ast.Constant) and isinstance(b.value, str)
                                               for b in (expr.body, expr.orelse))


def _bare_counts_in(source: str, name: str) -> list[str]:
    tree = ast.parse(source)
    internal: set[int] = set()   # f-strings of internal invariants nobody but a developer reads
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                ast.unparse(node.exc.func) in ("RuntimeError", "AssertionError"):
            internal.update(id(n) for n in ast.walk(node.exc))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr) or id(node) in internal:
            continue
        literal = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        if _MACHINE.search(literal):
            continue
        for v in node.values:
            if isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion == -1 \
                    and not _is_word(v.value):
                expr = ast.unparse(v.value)
                if _COUNTISH.search(expr) and not re.match(r"(fmt|_count|fmt_\w+)\b", expr.split("(")[0]) \
                        and not expr.startswith(("fmt.", "str(")):
                    out.append(f"{name}:{v.lineno}: {{{expr}}}")
    return out


def test_no_f_string_puts_a_count_in_bare() -> None:
    """A count in a sentence goes through ``fmt.count`` ("1,230"); the same number reads the same below 1,000,
    so only the code shows the ones the corpus does not reach."""
    found = [hit for pkg in ("analysis", "goodput_cli", "app") for p in sorted((ROOT / pkg).rglob("*.py"))
             for hit in _bare_counts_in(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)
    planted = ('t = f"{len(ranks)} ranks, {n_late} late, {fmt.count(n)} ok, {x[\'count\']} of {c.instances}"\n'
               'u = f"{len(p)} rank{\'s\' if len(p) > 1 else \'\'}"\nq = f"SELECT {len(x)} FROM t"\n'
               'raise RuntimeError(f"{len(a)} ops but {len(b)} kernels")\n')
    assert [h.split(": ")[1] for h in _bare_counts_in(planted, "planted")] == [
        "{len(ranks)}", "{n_late}", "{x['count']}", "{c.instances}", "{len(p)}"]
