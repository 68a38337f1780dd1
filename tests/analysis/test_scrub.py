"""Kept exports: the captured environment removed from all three places it lives, everything Goodput reads kept."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from analysis.api import Limits, analyze, ingest
from analysis.errors import TraceError
from analysis.readers.nsys import ingest as nsys_ingest
from analysis.readers.nsys.env import ALLOWED_KEYS
from analysis.readers.nsys.guard import validate
from tests.analysis.planting import copy_export
from tests.analysis.secrets import SECRET, plant_secrets
from tests.conftest import corpus_file


def _findings(trace) -> str:
    return json.dumps(analyze([trace], labels=["x"]).to_json(), sort_keys=True, default=str)


@pytest.mark.parametrize("name", ["cloverleaf-devsync.sqlite", "nccl-ring-2node-r1-ault44.sqlite",
                                  "unified-memory-a100.sqlite", "vecadd-2026.sqlite"])
def test_the_kept_copy_has_no_secret_and_ingests_to_the_same_findings(tmp_path, name):
    src = plant_secrets(corpus_file(name), tmp_path / "planted.sqlite")
    kept = tmp_path / "store" / "kept.sqlite"
    kept.parent.mkdir()
    first = ingest(src, tmp_path / "a" / "trace.duckdb", keep=kept)
    assert first.kept == kept
    data = kept.read_bytes()
    # Proven on the bytes: no planted value, and none of the real exports' own captured secrets either.
    for needle in (SECRET, "PMI_SHARED_SECRET", "USER=", "HOME=", "LOGNAME="):
        assert needle.encode() not in data, needle
    assert sorted(p.name for p in kept.parent.iterdir()) == ["kept.sqlite"]  # no temporary copy left
    again = ingest(kept, tmp_path / "b" / "trace.duckdb")
    assert {k: v for k, v in again.info.items() if k != "file"} == {k: v for k, v in first.info.items() if k != "file"}
    assert _findings(first.out) == _findings(again.out)
    before = validate(src, max_bytes=2**40, timeout_s=60)
    after = validate(kept, max_bytes=2**40, timeout_s=60)
    assert after.facts == before.facts and after.tables == before.tables and after.meta == before.meta


def test_allow_listed_job_facts_survive_with_the_separator_the_export_used(tmp_path):
    src = plant_secrets(corpus_file("cloverleaf-devsync.sqlite"), tmp_path / "planted.sqlite")
    kept = tmp_path / "kept.sqlite"
    ingest(src, tmp_path / "a" / "trace.duckdb", keep=kept)
    with sqlite3.connect(kept) as con:
        [env] = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()
        names = {r[0] for r in con.execute("SELECT name FROM TARGET_INFO_SYSTEM_ENV")}
        capture = con.execute("SELECT count(*) FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%'").fetchone()[0]
        [user] = con.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_USER'").fetchone()
    assert {item.split("=")[0] for item in env.split(";")} <= ALLOWED_KEYS
    assert "PMI_RANK=0" in env.split(";") and SECRET not in env
    assert names <= {"DeviceEnvironment", "Hostname", "CpuCores", "CpuArchitecture", "CpuDescription",
                     "OsDescription", "HardwarePlatform", "SoftwarePlatform", "NvDriverVersion",
                     "CudaDriverVersion", "GpuInfo"} and "ProcessEnvironment" not in names
    # Only allow-listed PROCESS_n environment variables remain (PMI_SIZE, PMI_LOCAL_RANK ...), no arguments.
    assert capture > 0 and user == ""
    with sqlite3.connect(kept) as con:
        rows = con.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%'").fetchall()
    assert all(n.endswith("ENVIRONMENT_VARIABLE") and v.split("=")[0] in ALLOWED_KEYS for n, v in rows), rows


def test_a_trigger_in_the_export_cannot_put_the_secret_back(tmp_path):
    src = plant_secrets(corpus_file("cloverleaf-devsync.sqlite"), tmp_path / "planted.sqlite")
    with sqlite3.connect(src) as con:  # a hostile export: deleting a capture row would re-insert the secret
        con.execute("CREATE TABLE stash (v TEXT)")
        con.execute("INSERT INTO stash VALUES (?)", (SECRET[::-1],))
        con.execute("CREATE TRIGGER back AFTER DELETE ON META_DATA_CAPTURE BEGIN "
                    "INSERT INTO META_DATA_CAPTURE (name, value) SELECT 'X', reverse(v) FROM stash; END")
    kept = tmp_path / "kept.sqlite"
    # Validation reads META_DATA_CAPTURE (for the job facts), so a trigger on it is refused before any
    # copy is written; the scrub's own connection disables triggers as a second line.
    with pytest.raises(TraceError) as err:
        ingest(src, tmp_path / "a" / "trace.duckdb", keep=kept)
    assert err.value.code == "unsafe_schema"
    assert not kept.exists()


def test_a_view_where_a_scrubbed_table_belongs_is_refused(tmp_path):
    src = copy_export(corpus_file("cloverleaf-devsync.sqlite"), tmp_path / "v.sqlite")
    with sqlite3.connect(src) as con:
        con.execute("ALTER TABLE META_DATA_CAPTURE RENAME TO capture_real")
        con.execute("CREATE VIEW META_DATA_CAPTURE AS SELECT * FROM capture_real")
    out = tmp_path / "a" / "trace.duckdb"
    with pytest.raises(TraceError) as err:
        ingest(src, out, keep=tmp_path / "kept.sqlite")
    assert err.value.code == "unsafe_schema"
    assert not out.exists() and not (tmp_path / "kept.sqlite").exists()
    assert not out.parent.exists() or [p.name for p in out.parent.iterdir()] == []


def _fake_free(monkeypatch, free: int) -> None:
    real = os.statvfs

    def statvfs(path):
        st = real(path)
        blocks = free // st.f_frsize
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, blocks, blocks, st.f_files,
                                              st.f_ffree, st.f_favail, st.f_flag, st.f_namemax))

    monkeypatch.setattr(os, "statvfs", statvfs)  # what shutil.disk_usage reads


def test_space_is_estimated_from_the_tables_read_so_a_small_volume_takes_small_exports(tmp_path, monkeypatch):
    src = corpus_file("vecadd-2026.sqlite")  # 0.6 MB: the old rule (size/2 + 64 MiB) wanted 64.3 MiB
    info = validate(src, max_bytes=2**40, timeout_s=60)
    need = nsys_ingest.space_needed(info, keep=True)
    assert info.table_bytes > 0 and need < 16 * 2**20
    # Independent of the estimate: what the tables read occupy, from SQLite's page accounting.
    with sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True) as con:
        pages = con.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    assert pages and info.table_bytes >= pages
    _fake_free(monkeypatch, 20 * 2**20)  # a nearly full small volume: 20 MiB free
    ingest(src, tmp_path / "a" / "trace.duckdb", keep=tmp_path / "kept.sqlite", limits=Limits())
    _fake_free(monkeypatch, need - 4096)
    with pytest.raises(TraceError) as err:
        ingest(src, tmp_path / "b" / "trace.duckdb", keep=tmp_path / "kept2.sqlite")
    assert err.value.code == "no_space" and f"{need:,}" in err.value.message
    assert not (tmp_path / "b" / "trace.duckdb").exists() and not (tmp_path / "kept2.sqlite").exists()


@pytest.mark.parametrize("name", ["devsync-heavy-report13.sqlite", "runtime-only-no-kernel-table.sqlite",
                                  "openacc-report12-nometa.sqlite"])
def test_facts_read_from_environment_blocks_survive_the_scrub(tmp_path, name):
    # These exports state rank and world size only in NUL-joined environment blocks in StringIds: the kept
    # copy keeps the blocks' allow-listed entries (and nothing else of them), so it reads to the same facts.
    src = corpus_file(name)
    kept = tmp_path / "kept.sqlite"
    ingest(src, tmp_path / "a" / "trace.duckdb", keep=kept)
    before, after = validate(src, max_bytes=2**34, timeout_s=60), validate(kept, max_bytes=2**34, timeout_s=60)
    assert before.facts.get("rank") is not None and after.facts == before.facts
    with sqlite3.connect(kept) as con:
        blocks = [v for (v,) in con.execute("SELECT value FROM StringIds WHERE instr(value, char(0)) > 0")]
    assert blocks and all(e.split("=")[0] in ALLOWED_KEYS for b in blocks for e in b.split("\x00") if e)


def test_env_strings_behind_blanks_and_allow_listed_keys_with_odd_values_are_not_kept(tmp_path):
    """A StringIds value with the assignment after a blank, and allow-listed keys whose values do not have
    their shape (RANK=<not digits>), in every place the environment lives: none of the planted values is in
    the stored bytes; the real rank still is."""
    secret = "gpsecretleadingblank7"
    odd = "gpoddrankvalue9"
    src = copy_export(corpus_file("cloverleaf-devsync.sqlite"), tmp_path / "planted.sqlite")
    with sqlite3.connect(src) as con:
        env = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()[0]
        sep = "\x00" if "\x00" in env else ";"
        con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ? WHERE name = 'DeviceEnvironment'",
                    (f"{sep}RANK={odd}{sep}SLURM_JOB_ID={odd}-{odd}!",))
        top = con.execute("SELECT max(id) FROM StringIds").fetchone()[0]
        con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", [
            (top + 1, f" AWS_SECRET_ACCESS_KEY={secret}"), (top + 2, f"\tTOKEN={secret}"),
            (top + 3, f"export X=1 SECRET={secret}"), (top + 4, f"PMI_SIZE={odd}\x00WORLD_SIZE=2\x00")])
        con.execute("CREATE TABLE IF NOT EXISTS META_DATA_CAPTURE (name TEXT, value TEXT)")
        con.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)",
                    ("PROCESS_0:ENVIRONMENT_VARIABLE", f'LOCAL_RANK="{odd}"'))
    kept = tmp_path / "kept.sqlite"
    ingest(src, tmp_path / "a" / "trace.duckdb", keep=kept)
    data = kept.read_bytes()
    for needle in (secret, odd):
        assert needle.encode() not in data, needle
    with sqlite3.connect(kept) as con:
        [env] = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()
    assert "PMI_RANK=0" in env.replace("\x00", ";").split(";")


def test_text_appended_to_host_descriptions_and_process_names_is_not_stored(tmp_path):
    """Text appended to OsDescription, CpuDescription and PROCESSES.name (after a newline, a ';' or as a
    K=V word) is in neither the kept export nor the normalized trace; the descriptions themselves stay."""
    planted = {"OsDescription": "gposdescsecret1", "CpuDescription": "gpcpudescsecret2", "name": "gpprocsecret3"}
    src = copy_export(corpus_file("vecadd-2026.sqlite"), tmp_path / "planted.sqlite")
    with sqlite3.connect(src) as con:
        os_before = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'OsDescription'").fetchone()
        con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ? WHERE name = 'OsDescription'",
                    (f"\nAPI_KEY={planted['OsDescription']}",))
        con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ? WHERE name = 'CpuDescription'",
                    (f" TOKEN={planted['CpuDescription']}",))
        assert con.execute("SELECT count(*) FROM PROCESSES").fetchone()[0] > 0
        con.execute("UPDATE PROCESSES SET name = name || ?", (f"; --key={planted['name']}",))
    kept = tmp_path / "kept.sqlite"
    first = ingest(src, tmp_path / "a" / "trace.duckdb", keep=kept)
    for where in (kept, first.out):
        data = where.read_bytes()
        for place, needle in planted.items():
            assert needle.encode() not in data, (where.name, place)
    with sqlite3.connect(kept) as con:
        os_after = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'OsDescription'").fetchone()
        names = [r[0] for r in con.execute("SELECT name FROM PROCESSES")]
    assert os_before is None or os_after[0] == os_before[0].rstrip()
    assert all(n and "=" not in n and ";" not in n for n in names)
    # The kept copy ingests to the same trace facts and findings as the original.
    again = ingest(kept, tmp_path / "b" / "trace.duckdb")
    assert _findings(first.out) == _findings(again.out)


def test_a_long_string_without_an_assignment_is_scrubbed_in_linear_time(tmp_path):
    """Issue #45 item 5: a 1M-character StringIds value without '=' made the scrub's search for assignments
    quadratic (about 11 minutes holding the GIL). Every pass is linear now, and unreferenced strings are
    blanked whatever they hold (item 4)."""
    import time

    secret = "gplongrunsecret4"
    src = copy_export(corpus_file("vecadd-2026.sqlite"), tmp_path / "long.sqlite")
    with sqlite3.connect(src) as con:
        top = con.execute("SELECT max(id) FROM StringIds").fetchone()[0]
        con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", [
            (top + 1, "a" * 1_000_000), (top + 2, "b" * 300_000 + f"={secret}"),
            (top + 3, "7" * 200_000 + f"%={secret}")])
    kept = tmp_path / "kept.sqlite"
    started = time.monotonic()
    ingest(src, tmp_path / "a" / "trace.duckdb", keep=kept, limits=Limits(timeout_s=60))
    assert time.monotonic() - started < 20
    with sqlite3.connect(kept) as con:
        values = dict(con.execute("SELECT id, value FROM StringIds WHERE id > ?", (top,)).fetchall())
    assert values == {top + 1: "", top + 2: "", top + 3: ""}


def test_the_scrub_process_is_killed_at_its_deadline_and_leaves_nothing(tmp_path, monkeypatch):
    """The scrub runs in a process of its own: past the deadline it is killed (whatever it is doing, even
    holding its GIL) and its temporary files go."""
    import time

    from analysis.readers.nsys.scrub import ScrubChild

    src = corpus_file("cupy-a100.sqlite")
    info = validate(src, max_bytes=2**40, timeout_s=60)
    store = tmp_path / "store"
    store.mkdir()
    # A child that cannot finish in time, whatever the machine's speed (a small export scrubs in about 0.1 s on
    # a quiet machine, faster than a short deadline can be raced): its interpreter sleeps at start-up, through a
    # sitecustomize on the PYTHONPATH it inherits.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(hook))
    child = ScrubChild(src, store / "kept.sqlite", expected=info, deadline=time.monotonic() + 0.5)
    monkeypatch.delenv("PYTHONPATH")
    started = time.monotonic()
    with pytest.raises(TraceError) as err:
        child.wait()
    assert err.value.code == "timeout" and time.monotonic() - started < 5
    assert child.proc.returncode is not None and list(store.iterdir()) == []
    ok = ScrubChild(src, store / "kept.sqlite", expected=info, deadline=time.monotonic() + 60)
    ok.wait()
    assert [p.name for p in store.iterdir()] == ["kept.sqlite"]


@pytest.mark.parametrize("name", ["saxpy-mpi-rank0-perlmutter.sqlite", "nccl-ring-2node-r0-ault43.sqlite"])
def test_canaries_planted_in_every_table_are_in_nothing_stored(tmp_path, name):
    """Issue #45 item 4: the kept copy still held ANALYSIS_FILE.filename and StringIds no row refers to
    ("Authorization: Bearer ...", a PEM key). Here a canary goes into every column of every table Goodput does
    not read, every column it does not read of the tables it reads, and unreferenced strings; none is in the
    kept copy or the normalized trace, and the kept copy ingests to the same findings."""
    from analysis.readers.nsys.source import SOURCE_TABLES

    src = plant_secrets(corpus_file(name), tmp_path / "canaries.sqlite")
    planted: dict[str, tuple[str, str]] = {}
    with sqlite3.connect(src) as con:
        tables = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                            "AND name NOT LIKE 'sqlite%'")]
        for table in tables:
            spec = SOURCE_TABLES.get(table)
            cols = [(c, pk) for _, c, _, _, _, pk in con.execute(f'PRAGMA table_info("{table}")')]
            plant = [c for c, pk in cols if not pk and (spec is None or c not in spec.columns)]
            if not plant:
                continue
            values = {}
            for c in plant:
                values[c] = f"gpcanary-{len(planted):05d}-Bearer-eyJ"
                planted[values[c]] = (table, c)
            if con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]:  # noqa: S608
                sets = ", ".join(f'"{c}" = ?' for c in plant)
                con.execute(f'UPDATE "{table}" SET {sets} WHERE rowid = (SELECT min(rowid) FROM "{table}")',  # noqa: S608
                            list(values.values()))
            elif spec is None:  # an empty table Goodput never reads: a row of canaries (keys: 1)
                keys = [c for c, pk in cols if pk]
                names = ", ".join(f'"{c}"' for c in keys + plant)
                marks = ", ".join("?" * (len(keys) + len(plant)))
                con.execute(f'INSERT INTO "{table}" ({names}) VALUES ({marks})',  # noqa: S608
                            [1] * len(keys) + list(values.values()))
        top = con.execute("SELECT max(id) FROM StringIds").fetchone()[0]
        pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
        for i, text in enumerate(("Authorization: Bearer gpcanary-strings-1", "password: gpcanary-strings-2",
                                  pem.replace("MIIE", "gpcanary-strings-3"))):
            con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (top + 1 + i, text))
    assert len(planted) > 100
    assert ("ANALYSIS_FILE" in tables) <= ("ANALYSIS_FILE" in {t for t, _ in planted.values()})
    kept = tmp_path / "store" / "kept.sqlite"
    kept.parent.mkdir()
    first = ingest(src, tmp_path / "a" / "trace.duckdb", keep=kept)
    for stored in (kept, first.out):
        data = stored.read_bytes()
        assert b"gpcanary-" not in data and SECRET.encode() not in data, (stored.name, [
            planted.get(m.decode(), m) for m in set(__import__("re").findall(rb"gpcanary-[\w-]{5}", data))][:10])
        assert b"BEGIN PRIVATE KEY" not in data
    again = ingest(kept, tmp_path / "b" / "trace.duckdb")
    assert _findings(first.out) == _findings(again.out)
