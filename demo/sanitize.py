"""Make the bundled demo export from a corpus file, keeping only harmless facts about the profiled machine.

Real exports carry the job's whole environment in ``TARGET_INFO_SYSTEM_ENV`` (tokens, user names,
paths), again in ``META_DATA_CAPTURE`` (one row per variable) and in ``StringIds``, and local paths in the
export metadata. This keeps an allow-list of hardware/OS descriptions,
blanks the path-like metadata and VACUUMs, so deleted values do not survive in free pages.

    .venv/bin/python demo/sanitize.py ../shared/corpus/nsys/brycelelbach__nsightful__cupy-power-iteration.sqlite \
        demo/cupy-power-iteration.sqlite
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

HARMLESS_ENV = ("CpuCores", "CpuArchitecture", "CpuDescription", "OsDescription", "HardwarePlatform",
                "SoftwarePlatform", "NvDriverVersion", "CudaDriverVersion", "Hostname", "GpuInfo")
SCRUBBED_META = ("EXPORT_USER", "EXPORT_HOST")


def sanitize(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    marks = ",".join("?" * len(HARMLESS_ENV))
    con.execute(f"DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name NOT IN ({marks})", HARMLESS_ENV)  # noqa: S608
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone():
            con.execute(f"UPDATE {table} SET value = '' WHERE name LIKE '%PATH%' OR name LIKE '%FILE%' "  # noqa: S608
                        f"OR name IN ({','.join('?' * len(SCRUBBED_META))})", SCRUBBED_META)
    if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'META_DATA_CAPTURE'").fetchone():
        # The capture options repeat the launched process's environment, one variable per row.
        con.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT%' OR name LIKE '%USER_NAME%' "
                    "OR name LIKE '%WORKING_DIR%' OR name LIKE '%ARGUMENT%'")
    # Process environment blocks also sit in StringIds (NUL-joined `K=V` strings that OSRT rows point to).
    con.execute("UPDATE StringIds SET value = '' WHERE instr(CAST(value AS BLOB), x'00') > 0 "
                "OR value GLOB '[A-Z_]*=*'")
    con.commit()
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    sanitize(Path(sys.argv[1]), Path(sys.argv[2]))
