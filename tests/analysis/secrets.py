"""Test helper: a real corpus export with a planted secret in every place nsys stores the job's environment."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.analysis.planting import copy_export

SECRET = "gp-planted-secret-5a1f9c"


def plant_secrets(src: Path, dst: Path, secret: str = SECRET) -> Path:
    """Copy ``src`` and put ``secret`` in the captured environment (TARGET_INFO_SYSTEM_ENV's DeviceEnvironment
    and a row of its own), in META_DATA_CAPTURE (a PROCESS_0 environment variable and an argument), in
    StringIds (a ``K=V`` string and a NUL-joined environment block) and in the export metadata (user)."""
    copy_export(src, dst)
    con = sqlite3.connect(dst)
    try:
        env = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()
        assert env, f"{src.name} has no captured environment to plant into"
        sep = "\x00" if "\x00" in env[0] else ";"
        con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ? WHERE name = 'DeviceEnvironment'",
                    (f"{sep}API_TOKEN={secret}",))
        # A row of its own, like the DeviceEnvironment row in every other column.
        cols = [r[1] for r in con.execute("PRAGMA table_info(TARGET_INFO_SYSTEM_ENV)")]
        picks = ", ".join("?" if c in ("name", "value") else f'"{c}"' for c in cols)
        args = ["ProcessEnvironment" if c == "name" else f"SECRET_KEY={secret}" for c in cols if c in ("name", "value")]
        con.execute(f"INSERT INTO TARGET_INFO_SYSTEM_ENV ({', '.join(cols)}) SELECT {picks} "  # noqa: S608
                    "FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'", args)
        con.execute("CREATE TABLE IF NOT EXISTS META_DATA_CAPTURE (name TEXT, value TEXT)")
        con.executemany("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)", [
            ("PROCESS_0:ENVIRONMENT_VARIABLE", f'API_TOKEN="{secret}"'),
            ("PROCESS_0:ARGUMENT_1", f"--token={secret}")])
        top = con.execute("SELECT max(id) FROM StringIds").fetchone()[0] or 0
        con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", [
            (top + 1, f"API_TOKEN={secret}"), (top + 2, f"HOME=/home/x\x00API_TOKEN={secret}\x00USER=x")])
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                con.execute(f"INSERT INTO {table} (name, value) VALUES ('EXPORT_USER', ?)", (secret,))  # noqa: S608
        con.commit()
    finally:
        con.close()
    assert dst.read_bytes().count(secret.encode()) >= 7
    return dst
