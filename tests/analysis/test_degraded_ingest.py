"""Exports lacking columns: a column that only refines the answer is read as unknown and the report
says so (``degraded``); a core one is refused as ``unsupported_schema`` naming it. The columns are dropped from
copies of real exports at test time, one per kind, and the real ingest runs on them."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.api import analyze, ingest
from analysis.errors import TraceError
from analysis.model.trace import Trace
from tests.analysis.planting import copy_export
from tests.conftest import ROOT, corpus_file

BASE = "cloverleaf-devsync.sqlite"  # nsys 2024.5.1: kernels, pageable copies, 1,312 device syncs


def rebuild_without(path: Path, table: str, column: str, retype: str | None = None) -> None:
    """Rebuild ``table`` without ``column`` (or, with ``retype``, with that column declared of another type)."""
    con = sqlite3.connect(path)
    with con:
        cols = [(r[1], r[2]) for r in con.execute(f'PRAGMA table_info("{table}")')]
        keep = [(n, retype if n == column else t) for n, t in cols if n != column or retype]
        names = ", ".join(f'"{n}"' for n, _ in keep)
        con.execute(f'CREATE TABLE "_new" ({", ".join(f"{chr(34)}{n}{chr(34)} {t}" for n, t in keep)})')
        con.execute(f'INSERT INTO "_new" ({names}) SELECT {names} FROM "{table}"')  # noqa: S608
        con.execute(f'DROP TABLE "{table}"')
        con.execute(f'ALTER TABLE "_new" RENAME TO "{table}"')
    con.close()


def _variant(tmp_path: Path, table: str, column: str, retype: str | None = None) -> Path:
    src = copy_export(corpus_file(BASE), tmp_path / "variant.sqlite")
    rebuild_without(src, table, column, retype)
    return src


def _ingest(tmp_path: Path, src: Path) -> Path:
    out = tmp_path / "report.duckdb"
    ingest(src, out)
    return out


def test_kernels_without_global_pid_are_read_with_the_process_unknown(tmp_path):
    out = _ingest(tmp_path, _variant(tmp_path, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"))
    t = Trace(out, "variant.sqlite")
    try:
        assert t.scalar("SELECT count(*) FROM kernels") == 1312
        assert t.scalar("SELECT count(*) FROM kernels WHERE pid IS NOT NULL") == 0
        assert t.meta["tool_version"].startswith("2024.5.1")  # a real version is claimed
    finally:
        t.close()
    result = analyze([out], labels=["variant.sqlite"]).to_json()
    (part,) = result["reports"][0]["degraded"]
    assert part["table"] == "CUPTI_ACTIVITY_KIND_KERNEL" and part["columns"] == ["globalPid"]
    assert "process ids unknown" in part["effect"]
    assert all(r["status"] != "error" for r in result["rules"])
    assert result["findings"], "the rules still run on the kernels"


def test_api_calls_without_names_degrade_and_sync_rules_see_no_calls(tmp_path):
    out = _ingest(tmp_path, _variant(tmp_path, "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"))
    result = analyze([out]).to_json()
    (part,) = result["reports"][0]["degraded"]
    assert part["columns"] == ["nameId"] and "call names unknown" in part["effect"]
    assert not [f for f in result["findings"] if f["rule_id"] == "SYNC001"]
    (tmp_path / "full").mkdir()
    full = analyze([_ingest(tmp_path / "full", copy_export(corpus_file(BASE), tmp_path / "full.sqlite"))]).to_json()
    assert [f for f in full["findings"] if f["rule_id"] == "SYNC001"], "the intact export has SYNC001"
    assert full["reports"][0]["degraded"] == []


def test_column_of_the_wrong_type_is_not_read_and_is_reported(tmp_path):
    out = _ingest(tmp_path, _variant(tmp_path, "CUPTI_ACTIVITY_KIND_MEMCPY", "bytes", retype="TEXT"))
    t = Trace(out, "variant.sqlite")
    try:
        assert t.scalar("SELECT count(*) FROM memcpy") == 279
        assert t.scalar("SELECT count(*) FROM memcpy WHERE bytes IS NOT NULL") == 0
        assert json.loads(t.meta["degraded"]) == [{"table": "CUPTI_ACTIVITY_KIND_MEMCPY", "columns": ["bytes"],
                                                   "effect": "sizes unknown"}]
    finally:
        t.close()


def test_auxiliary_table_without_its_core_column_is_left_unread(tmp_path):
    out = _ingest(tmp_path, _variant(tmp_path, "TARGET_INFO_SESSION_START_TIME", "utcEpochNs"))
    result = analyze([out]).to_json()
    (part,) = result["reports"][0]["degraded"]
    assert part["table"] == "TARGET_INFO_SESSION_START_TIME" and "cannot be aligned" in part["effect"]
    assert result["reports"][0]["session_start_utc_ns"] is None


@pytest.mark.parametrize(("table", "column"), [("CUPTI_ACTIVITY_KIND_KERNEL", "start"),
                                               ("CUPTI_ACTIVITY_KIND_RUNTIME", "end"), ("StringIds", "value"),
                                               ("NVTX_EVENTS", "eventType")])
def test_core_column_missing_is_refused_naming_it(tmp_path, table, column):
    if table == "NVTX_EVENTS":  # cloverleaf has no NVTX
        src = copy_export(corpus_file("cupy-power-iteration.sqlite"), tmp_path / "variant.sqlite")
        rebuild_without(src, table, column)
    else:
        src = _variant(tmp_path, table, column)
    with pytest.raises(TraceError) as info:
        ingest(src, tmp_path / "report.duckdb")
    assert info.value.code == "unsupported_schema"
    assert f"table {table} lacks column(s) {column}" in info.value.message
    assert info.value.details["columns"] == [column] and not (tmp_path / "report.duckdb").exists()


def test_cli_text_and_json_say_the_report_is_degraded(tmp_path):
    src = _variant(tmp_path, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid")
    goodput = [sys.executable, "-m", "goodput_cli.main", "analyze", "--quiet"]
    text = subprocess.run([*goodput, str(src)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert text.returncode == 0, text.stderr
    assert "degraded: CUPTI_ACTIVITY_KIND_KERNEL lacks globalPid: process ids unknown" in text.stdout
    js = subprocess.run([*goodput, "--format", "json", str(src)], capture_output=True, text=True, cwd=ROOT,
                        timeout=300)
    assert json.loads(js.stdout)["reports"][0]["degraded"][0]["columns"] == ["globalPid"]


def test_gpu_work_without_processes_keeps_its_time_breakdown(tmp_path):
    """A filtered export without globalPid in any GPU table: the time partition of the device is exact (it needs
    no process), the process-dependent parts are reported as unknown."""
    src = copy_export(corpus_file(BASE), tmp_path / "variant.sqlite")
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        rebuild_without(src, table, "globalPid")
    (tmp_path / "v").mkdir()
    (tmp_path / "full").mkdir()
    degraded = analyze([_ingest(tmp_path / "v", src)]).to_json()
    intact = analyze([_ingest(tmp_path / "full", copy_export(corpus_file(BASE), tmp_path / "full.sqlite"))]).to_json()
    keys = ("compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "span_ns")
    bd_d, bd_i = degraded["reports"][0]["breakdown"], intact["reports"][0]["breakdown"]
    assert {k: bd_d[k] for k in keys} == {k: bd_i[k] for k in keys}
    assert [d["pid"] for d in bd_d["devices"]] == [None]
    assert {d["table"] for d in degraded["reports"][0]["degraded"]} == {"CUPTI_ACTIVITY_KIND_KERNEL",
                                                                      "CUPTI_ACTIVITY_KIND_MEMCPY"}
