"""Binary .nsys-rep reports: converted with an installed `nsys`, refused with the command otherwise."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from pathlib import Path

import duckdb
import pytest

from analysis.api import detect_kind, ingest
from analysis.errors import TraceError
from tests.conftest import corpus_file

EXPORT = corpus_file("vecadd-2026.sqlite")
# What `nsys export` would do, for a machine without Nsight Systems: copy the export named by the
# report's contents to --output, or fail like nsys does on a report it cannot read.
FAKE_NSYS = """#!{python}
import shutil, sys
args = sys.argv[1:]
assert args[:5] == ["export", "--type", "sqlite", "--force-overwrite", "true"], args
out, rep = args[args.index("--output") + 1], args[-1]
source = open(rep, "rb").read().decode().strip()
if source == "broken":
    sys.stderr.write("Error: the report file is corrupted\\n")
    sys.exit(1)
shutil.copyfile(source, out)
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nsys"
    script.write_text(FAKE_NSYS.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return script


def rep_file(tmp_path: Path, content: str) -> Path:
    rep = tmp_path / "profile.nsys-rep"
    rep.write_text(content)
    return rep


def test_without_nsys_the_error_names_the_export_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    rep = rep_file(tmp_path, "binary report")
    with pytest.raises(TraceError) as err:
        detect_kind(rep)
    assert err.value.code == "nsys_rep_needs_nsys"
    assert "nsys export --type sqlite --output profile.sqlite profile.nsys-rep" in err.value.message


def test_with_nsys_the_report_is_converted_and_ingested(tmp_path, fake_nsys):
    rep = rep_file(tmp_path, str(EXPORT))
    out = tmp_path / "out" / "trace.duckdb"
    result = ingest(rep, out)
    assert result.tool == "nsys"
    with sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True) as raw:
        expected = raw.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == expected
    assert result.info["counts"]["kernels"] == expected
    assert sorted(p.name for p in out.parent.iterdir()) == ["trace.duckdb"]  # the converted copy is gone


def test_a_report_nsys_cannot_export_fails_and_leaves_nothing(tmp_path, fake_nsys):
    rep = rep_file(tmp_path, "broken")
    out = tmp_path / "out" / "trace.duckdb"
    with pytest.raises(TraceError) as err:
        ingest(rep, out)
    assert err.value.code == "corrupt"
    assert "the report file is corrupted" in err.value.message
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
