"""Issue #39 class 7: no verdict or finding sentence contradicts its own numbers, on any corpus export.

Every sentence Goodput writes about a report (the verdict's text, each finding's title and message) is read
back and checked against itself and the report's numbers:

- "A of (the) B": a part is never larger than its whole (1 % slack for rounding to three digits);
- "... add up to T ...; longest L": the longest of a set is never above its total;
- a share is never above 100 % (nothing printed explains such a share);
- the verdict's "costs X" is its ``impact_ns``; a verdict about the GPU work costs at most its window;
- each device's idle is never above its window (``breakdown``: idle + busy parts = span);
- an idle anatomy's "name ... xN" counts calls, ranges, samples, migrations or off-CPU stretches, never pieces of
  them: N is at most the export's rows of that name (SQL), whatever cut them (gaps, phases, ranges inside it).
"""

from __future__ import annotations

import re

import pytest

from analysis.diagnosis.idle_anatomy import HOST_WORK_SUFFIX
from analysis.diagnosis.idle_classes import OFF_CPU_NAME_SQL
from analysis.model.trace import Trace
from tests.analysis.planting import ingested
from tests.analysis.test_verdict_substance import _result
from tests.conftest import NSYS_FILES

UNIT = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
NUM = r"(\d[\d,]*(?:\.\d+)?)\s*(ns|µs|us|ms|s)\b"
SLACK = 1.01  # three significant digits


def _s(value: str, unit: str) -> float:
    return float(value.replace(",", "")) * UNIT[unit]


def contradictions(text: str) -> list[str]:
    """The places where a sentence contradicts its own numbers."""
    out = []
    for m in re.finditer(NUM + r" of (?:the |its |their )?" + NUM, text):
        if _s(m[1], m[2]) > SLACK * _s(m[3], m[4]):
            out.append(f"part above whole: {m[0]!r}")
    for m in re.finditer(r"add up to " + NUM + r".{0,80}?longest " + NUM, text):
        if _s(m[3], m[4]) > SLACK * _s(m[1], m[2]):
            out.append(f"longest above total: {m[0]!r}")
    for m in re.finditer(r"(\d[\d,]*(?:\.\d+)?)\s*%", text):
        if float(m[1].replace(",", "")) > 100.0:
            out.append(f"share above 100%: {text[max(0, m.start() - 60):m.end()]!r}")
    return out


# Per anatomy category, the rows a name of it can come from (SQL over the ingested tables, one process).
_ROWS = {"cuda": "SELECT name n FROM cuda_api WHERE pid = $pid", "os": "SELECT name n FROM osrt WHERE pid = $pid",
         "nvtx": "SELECT text n FROM nvtx WHERE pid = $pid AND kind <> 'mark'",
         "host_cpu": "SELECT COALESCE(function, module, '?') n FROM cpu_samples WHERE pid = $pid",
         "uvm_migration": "SELECT copy_kind n FROM memcpy WHERE pid = $pid AND copy_kind LIKE 'UVM%'",
         "off_cpu": f"SELECT {OFF_CPU_NAME_SQL} n FROM off_cpu WHERE pid = $pid"}  # noqa: S608 - a constant
_SOURCES = {"allocation": ("cuda",), "sync": ("cuda",), "sync_copy": ("cuda",), "memset": ("cuda",),
            "launch": ("cuda",), "cuda_other": ("cuda",), "jit_module": ("cuda", "nvtx"), "nccl_setup": ("nvtx",),
            "mpi": ("nvtx",), "user_range": ("nvtx",), "os_io": ("os",), "os_wait": ("os",), "os_other": ("os",),
            "host_cpu": ("host_cpu",), "uvm_migration": ("uvm_migration",), "off_cpu": ("off_cpu",)}


def over_counted(path, result: dict) -> list[str]:
    """The anatomy names whose count is above the export's rows of that name (``_ROWS``; a migration gap's
    host work, ``UVM_DtoH, host on CPU``, counts the migrations of its kind)."""
    out = []
    t = Trace(ingested(path), path.name)
    try:
        for rep in result["reports"]:
            for e in rep.get("idle_anatomy") or []:
                for c in e["categories"]:
                    for top in c["top"]:
                        if c["category"] == "none" or e["pid"] is None:
                            continue
                        name = top["name"].removesuffix(HOST_WORK_SUFFIX)
                        rows = sum(int(t.scalar(f"SELECT COUNT(*) FROM ({_ROWS[s]}) WHERE n = $n",  # noqa: S608
                                                {"pid": e["pid"], "n": name}) or 0)
                                   for s in _SOURCES[c["category"]] if t.has_rows(_ROWS[s].split(" FROM ")[1].split()[0]))
                        if top["calls"] > rows:
                            out.append(f"{e['phase']} {c['category']} {top['name']} x{top['calls']} > {rows} rows")
    finally:
        t.close()
    return out


def test_the_checks_catch_what_they_check() -> None:
    """The issue's own example (nvFuser, before) and two more, caught; their corrections pass."""
    assert contradictions("9 gaps add up to 157 ms (5.0% of the span); longest 351 ms.")
    assert contradictions("idle 827 ms of the 478 ms window")
    assert contradictions("owns 112.5% of the idle")
    assert not contradictions("9 gaps add up to 351 ms; longest 351 ms; 157 ms of it stays this rule's")
    assert not contradictions("987 ms of the 1.37 s trace")


@pytest.mark.parametrize("path", NSYS_FILES, ids=[p.name.split("__")[-1] for p in NSYS_FILES])
def test_no_sentence_contradicts_its_numbers(path) -> None:
    result = _result(path.name.split("__")[-1])
    v = result["verdict"]
    bad = [("verdict", c) for c in contradictions(v["text"] or "")]
    for f in result["findings"]:
        bad += [(f["rule_id"], c) for c in contradictions(f"{f.get('title') or ''}. {f.get('message') or ''}")]
    assert not bad, bad
    assert not over_counted(path, result)
    if v.get("impact_ns") is not None:
        m = re.search(r"costs " + NUM, v["text"])
        if m:
            assert abs(_s(m[1], m[2]) - v["impact_ns"] / 1e9) <= 0.006 * v["impact_ns"] / 1e9, v
    for rep in result["reports"]:
        for d in (rep.get("breakdown") or {}).get("devices") or []:
            assert 0 <= d["idle_ns"] <= d["span_ns"]
            assert d["compute_ns"] + d["comm_exposed_ns"] + d["memory_only_ns"] + d["idle_ns"] == d["span_ns"]
        # A verdict about the GPU work costs at most its window (start-up and teardown are about the trace: their
        # sentence's "A of the B trace" is checked above).
        # A one-shot program's start-up that feeds its data path is counted as such ("and X of start-up").
        window = int((rep.get("breakdown") or {}).get("span_ns") or 0)
        extra = re.search(NUM + r" of start-up", v["text"] or "")
        window += round(_s(extra[1], extra[2]) * 1e9 * SLACK) if extra else 0
        if v.get("impact_ns") is not None and v["kind"] not in ("startup", "teardown") and window:
            assert v["impact_ns"] <= window, v
