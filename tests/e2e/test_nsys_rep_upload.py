"""A binary .nsys-rep uploaded through the API ingests with the worker's `nsys`: the stored
upload keeps its suffix, so the worker converts it instead of refusing the same bytes as not SQLite."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from analysis.api import analyze, ingest
from tests.analysis.secrets import SECRET, plant_secrets
from tests.analysis.test_nsys_rep import FAKE_NSYS
from tests.conftest import corpus_file
from tests.reliability.helpers import LANES_VERSION, OVERVIEW_VERSION, files_holding, stored_files

pytestmark = [pytest.mark.slow, pytest.mark.services]


def test_an_nsys_rep_upload_gets_findings(make_service, tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    nsys = bindir / "nsys"  # the stand-in: `nsys export` copies the export the report names
    nsys.write_text(FAKE_NSYS.format(python=sys.executable))
    nsys.chmod(nsys.stat().st_mode | stat.S_IXUSR)
    path = f"{bindir}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)  # the web server (in this process) sniffs the upload with it too
    export = plant_secrets(corpus_file("cupy-a100.sqlite"), tmp_path / "export.sqlite")
    rep = tmp_path / "profile.nsys-rep"
    rep.write_text(str(export))

    svc = make_service("sqlite")
    svc.start_web()
    svc.start_worker(PATH=path)
    run = svc.wait_run(svc.upload([rep], job="rep")["id"])
    assert run["status"] == "ready", svc.log_tail()
    [report] = run["reports"]
    assert (report["name"], report["kind"], report["status"], report["error"]) == (
        "profile.nsys-rep", "nsys", "ready", None)
    expected = analyze([ingest(export, tmp_path / "direct" / "trace.duckdb").out], labels=[report["name"]]).to_json()
    findings = svc.get(f"/runs/{run['id']}/findings?page_size=200")["items"]
    assert findings and [(f["rule_id"], f["impact_ns"]) for f in findings] == [
        (f["rule_id"], f["impact_ns"]) for f in expected["findings"]]
    # Kept: the converted export, as SQLite and without the captured environment; the .nsys-rep is gone.
    sha = report["sha256"]
    kept = f"uploads/{sha[:2]}/{sha}.kept.sqlite"
    # Beside the trace: its own analysis, one folder with the result (cross-rank facts such as collectives.parquet
    # are written only where the window holds NCCL kernels or MPI calls; this export has neither).
    stored = stored_files(svc.settings.data_dir)
    analysis = [f for f in stored if f.startswith(f"reports/{report['id']}/analysis-")]
    assert sorted(f.rsplit("/", 1)[1] for f in analysis) == ["analysis.json"]
    assert len({f.rsplit("/", 1)[0] for f in analysis}) == 1
    assert [f for f in stored if f not in analysis] == sorted([
        f"reports/{report['id']}/trace.duckdb", kept, f"reports/{report['id']}/trace.lanes-v{LANES_VERSION}.json",
        f"reports/{report['id']}/trace.overview-v{OVERVIEW_VERSION}.parquet"])
    assert (svc.settings.data_dir / kept).read_bytes().startswith(b"SQLite format 3\x00")
    assert files_holding(svc.settings.data_dir, SECRET) == []
