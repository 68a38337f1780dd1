"""The bundled demo export ingests and carries none of the profiled job's environment."""

from __future__ import annotations

import re

from analysis.api import ingest
from analysis.model.trace import Trace
from tests.conftest import ROOT

DEMO = ROOT / "demo" / "cupy-power-iteration.sqlite"


def test_demo_has_no_captured_environment():
    data = DEMO.read_bytes()
    # `KEY=value` pairs of a shell environment (PATH, HOME, SHELL ...) and Colab's credential endpoints.
    for needle in (b"PATH=", b"HOME=", b"SHELL=", b"TBE_", b"COLAB_", b"DeviceEnvironment", b"/content"):
        assert needle not in data, needle
    assert not re.search(rb"\b[A-Z][A-Z0-9_]{2,}=[^\s;]+;[A-Z][A-Z0-9_]{2,}=", data)


def test_demo_ingests(tmp_path):
    out = tmp_path / "demo.duckdb"
    info = ingest(DEMO, out).info
    assert info["counts"]["kernels"] == 3689 and info["devices"] == [{"id": 0, "name": "Tesla T4"}]
    trace = Trace(out, DEMO.name)
    assert trace.scalar("SELECT count(*) FROM nvtx WHERE domain = 'CCCL'") > 0
    trace.close()
