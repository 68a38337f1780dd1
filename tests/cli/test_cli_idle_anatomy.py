"""`goodput analyze` prints the idle anatomy under the breakdown: a line per device and phase, then its categories
with their share and top names, the names escaped for the terminal."""

from __future__ import annotations

import re

from analysis import fmt
from analysis.api import analyze
from goodput_cli.render import text
from tests.analysis.planting import ingested
from tests.conftest import corpus_file


def test_idle_lines_follow_the_breakdown_and_add_up():
    result = analyze([ingested(corpus_file("saxpy-mpi-rank0-perlmutter.sqlite"))]).to_json()
    lines = text(result).splitlines()
    at = next(i for i, line in enumerate(lines) if "idle anatomy, pid" in line)
    assert "goodput" in lines[at - 1]  # right under the breakdown
    entry = result["reports"][0]["idle_anatomy"][0]  # the first line is the first (device, phase)
    assert f"{fmt.duration(entry['idle_ns'])} idle" in lines[at]
    shown = [re.match(r"^\s+(\w+)\s+([\d,.]+ (?:s|ms|µs|ns))\s+([\d.]+ %)", line)
             for line in lines[at + 1:at + 1 + len(entry["categories"])]]
    cats = entry["categories"][:6]
    assert [m.group(1) for m in shown[:len(cats)] if m] == [c["category"] for c in cats]
    # Durations and shares go through the one formatting module, never a fixed "%.3f ms".
    assert [m.group(2) for m in shown[:len(cats)] if m] == [fmt.duration(c["ns"]) for c in cats]
    assert [m.group(3) for m in shown[:len(cats)] if m] == [fmt.pct(100.0 * c["ns"] / entry["idle_ns"]) for c in cats]
    assert "MPI_Send" in "\n".join(lines[at:at + 7])


def test_control_characters_in_names_are_escaped():
    result = {"reports": [{"file": "r", "tool": "nsys", "counts": {}, "idle_anatomy": [
        {"pid": 1, "device": 0, "phase": "steady", "idle_ns": 1000, "threads": [1],
         "categories": [{"category": "user_range", "ns": 1000,
                         "top": [{"name": "step\x1b[31m red", "ns": 1000, "calls": 1}]}]}]}],
        "findings": [], "rules": []}
    out = text(result)
    assert "\x1b" not in out and "step\\x1b[31m red" in out


def test_off_cpu_is_a_line_like_any_category():
    """pytorch-nvfuser-h200: the launching thread switched out (its scheduler's events) outside every call and
    range prints as ``off_cpu`` with its stretches' name and count, the JSON's figures."""
    result = analyze([ingested(corpus_file("pytorch-nvfuser-h200.sqlite"))]).to_json()
    entry = next(e for e in result["reports"][0]["idle_anatomy"] if e["phase"] == "work")
    (off,) = [c for c in entry["categories"] if c["category"] == "off_cpu"]
    (top,) = off["top"]
    assert top["name"] == "off CPU" and top["ns"] == off["ns"] > 0 and top["calls"] > 100
    lines = text(result).splitlines()
    at = next(i for i, x in enumerate(lines) if "idle anatomy, pid" in x and "[work]" in x)
    line = next(x for x in lines[at + 1:at + 7] if x.strip().startswith("off_cpu"))
    assert fmt.duration(off["ns"]) in line and f"off CPU {fmt.duration(top['ns'])} x{top['calls']}" in line
