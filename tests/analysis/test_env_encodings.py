"""Rank and world size from every encoding of the captured environment seen in real exports.

Each case plants an MPI rank's environment into a copy of a real export, in one of the three places nsys
keeps it and with the separator real exports use there, and ingests the copy with the real reader."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from analysis.api import ingest
from analysis.diagnosis.summary import report_info
from analysis.model.trace import Trace
from analysis.readers.nsys.env import job_facts, parse_allowed, split_entries
from tests.analysis.planting import copy_export
from tests.conftest import corpus_file

BASE = "cupy-power-iteration.sqlite"  # 2025.3: ';' SYSTEM_ENV, META_DATA_CAPTURE rows, StringIds blocks; no rank
SECRET = "s3cr3t-token-7f1c"
# A 2021-era MPI rank's variables around the allow-listed ones: values holding ';' and newlines, a secret.
VARS = [("LS_COLORS", "rs=0:di=01;34:ln=01;36"), ("OMPI_COMM_WORLD_RANK", "3"), ("PMI_SHARED_SECRET", SECRET),
        ("BASH_FUNC_ml%%", "() {  eval $($LMOD_CMD bash \"$@\")\n}"), ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"), ("SLURM_JOB_ID", "4242")]


def _entries(sep: str) -> str:
    return sep.join(f"{k}={v}" for k, v in VARS if sep not in v or sep == ";")


def _blank(con: sqlite3.Connection) -> None:
    """Remove the base export's own environment from all three places."""
    con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' WHERE name = 'DeviceEnvironment'")
    con.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT%'")
    con.execute("UPDATE StringIds SET value = '' WHERE instr(CAST(value AS BLOB), x'00') > 0")


def plant_system_env(sep: str):
    def plant(con: sqlite3.Connection) -> None:
        con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'", [_entries(sep)])
    plant.__name__ = f"system_env_{ {';': 'semicolon', chr(0): 'nul', chr(10): 'newline'}[sep] }"
    return plant


def plant_capture(con: sqlite3.Connection) -> None:
    for k, v in VARS:
        con.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                    [f'{k}="{v}"'])


def plant_string_block(con: sqlite3.Connection) -> None:
    sid = con.execute("SELECT MAX(id) + 1 FROM StringIds").fetchone()[0]
    con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", [sid, "\x00".join(f"{k}={v}" for k, v in VARS)])


PLANTS = [plant_system_env(";"), plant_system_env("\x00"), plant_system_env("\n"), plant_capture, plant_string_block]


@pytest.mark.parametrize("plant", PLANTS, ids=[p.__name__ for p in PLANTS])
def test_rank_and_world_size_from_each_encoding(tmp_path: Path, plant) -> None:
    src = copy_export(corpus_file(BASE), tmp_path / "export.sqlite")
    con = sqlite3.connect(src)
    with con:
        _blank(con)
        plant(con)
    con.close()
    out = tmp_path / "report.duckdb"
    ingest(src, out)
    trace = Trace(out, "export.sqlite")
    try:
        info = report_info(trace)
        assert (info["rank"], info["world_size"], info["local_rank"], info["job_id"]) == (3, 8, 1, "4242")
    finally:
        trace.close()
    data = out.read_bytes()
    assert SECRET.encode() not in data and b"PMI_SHARED_SECRET" not in data and b"LS_COLORS" not in data


def test_base_export_has_no_rank_before_planting(tmp_path: Path) -> None:
    out = tmp_path / "report.duckdb"
    ingest(corpus_file(BASE), out)
    trace = Trace(out, BASE)
    try:
        assert trace.meta.get("rank") is None and trace.meta.get("world_size") is None
    finally:
        trace.close()


def test_real_2022_export_with_nul_separated_environment(tmp_path: Path) -> None:
    """saxpy-mpi-rank0-perlmutter keeps DeviceEnvironment NUL-separated: PMI_RANK=0, PMI_SIZE=2 are in it."""
    src = corpus_file("saxpy-mpi-rank0-perlmutter.sqlite")
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    env = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()[0]
    con.close()
    entries = env.split("\x00")
    assert "PMI_RANK=0" in entries and "PMI_SIZE=2" in entries and ";" in env
    out = tmp_path / "report.duckdb"
    ingest(src, out)
    trace = Trace(out, src.name)
    try:
        assert (trace.meta["rank"], trace.meta["world_size"]) == ("0", "2")
    finally:
        trace.close()


def test_separator_is_the_one_that_reads_most_entries() -> None:
    # ';'-separated with a multi-line value; newline-separated with values holding ';'.
    semi = "A=1;BASH_FUNC_x%%=() {\n RANK=9\n};RANK=2;LS_COLORS=di=01;34"
    assert parse_allowed(semi) == {"RANK": "2"}
    lines = "LS_COLORS=rs=0:di=01;34:ln=01;36\nRANK=5\nWORLD_SIZE=6\nX=a;b"
    assert parse_allowed(lines) == {"RANK": "5", "WORLD_SIZE": "6"}
    assert split_entries("RANK=1\x00X=a;b\nc") == ["RANK=1", "X=a;b\nc"]


def test_processes_that_disagree_give_no_rank() -> None:
    two = [{"RANK": "0", "WORLD_SIZE": "2"}, {"RANK": "1", "WORLD_SIZE": "2"}]
    facts = job_facts(None, None, two)
    assert facts["rank"] is None and facts["world_size"] == "2"
    # The system environment wins over the captured processes.
    assert job_facts("RANK=1;WORLD_SIZE=2", None, two)["rank"] == "1"
