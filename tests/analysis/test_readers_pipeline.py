"""Every corpus NCCL log through the library's one door, as the CLI and the workers call it: detected, ingested
and analyzed as one run, with its network path, the NET rules' status and findings, and a JSON result that
the committed schema accepts."""

from __future__ import annotations

import json

import jsonschema_rs
import pytest

from analysis.api import ToolKind, analyze, ingest, result_schema
from tests.conftest import corpus_dir

NCCL_LOGS = sorted((corpus_dir() / "nccl").glob("*.log"))


@pytest.mark.parametrize("log", NCCL_LOGS, ids=lambda p: p.name.split("__")[-1])
def test_every_corpus_log_goes_through_the_pipeline(log, tmp_path):
    out = tmp_path / "log.duckdb"
    assert ingest(log, out).tool == ToolKind.NCCL
    result = json.loads(json.dumps(analyze([out], labels=[log.name]).to_json()))
    jsonschema_rs.Draft202012Validator(result_schema()).validate(result)
    (rep,) = result["reports"]
    assert rep["tool"] == "nccl" and rep["file"] == log.name
    path = result["network_path"]
    assert path["report"] == log.name and "joined" not in path  # no nsys report to join
    assert len(path["ranks"]) == rep["counts"]["ranks"]
    net = [r for r in result["rules"] if r["id"].startswith("NET")]
    assert net and all(r["status"] == "ok" for r in net)
    found = [f for f in result["findings"] if f["rule_id"].startswith("NET")]
    assert sum(r["findings"] for r in net) == len(found)
    assert all(f["report"] == log.name and f["phase"] == "all" for f in found)
    # A verdict exactly when a NET rule found something serious, speaking for that rule.
    serious = [f for f in found if f["severity"] in ("critical", "warning")]
    assert (result.get("verdict") is not None) == bool(serious)
    if serious:
        assert result["verdict"]["kind"] == "network"
        assert result["verdict"]["rule_id"] in {f["rule_id"] for f in serious}
