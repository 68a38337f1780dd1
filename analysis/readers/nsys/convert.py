"""Turn a binary .nsys-rep report into an SQLite export with the `nsys` binary, when one is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from analysis import fmt
from analysis.errors import TraceError

REP_SUFFIXES = (".nsys-rep", ".qdrep")


def export_command(name: str) -> str:
    """The command a person runs to convert a report by hand."""
    stem = name.rsplit(".", 1)[0] if "." in name else name
    return f"nsys export --type sqlite --output {stem}.sqlite {name}"


def nsys_binary() -> str | None:
    return shutil.which("nsys")


def export_sqlite(src: Path, dst: Path, *, timeout_s: float) -> None:
    """Run `nsys export --type sqlite` on ``src`` into ``dst``; TraceError when it cannot."""
    nsys = nsys_binary()
    if nsys is None:
        raise TraceError("nsys_rep_needs_nsys", "this is a binary .nsys-rep report and no `nsys` is installed "
                         f"here; convert it with `{export_command(src.name)}` and upload the SQLite file")
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(dst), str(src)]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        dst.unlink(missing_ok=True)
        raise TraceError("timeout", f"`nsys export` ran longer than {fmt.exact(timeout_s)} s") from None
    if proc.returncode != 0 or not dst.is_file() or dst.stat().st_size == 0:
        dst.unlink(missing_ok=True)
        why = " ".join(proc.stderr.decode("utf-8", "replace").split())[:300] or f"exit status {proc.returncode}"
        raise TraceError("corrupt", f"`nsys export` could not convert this report: {why}")
