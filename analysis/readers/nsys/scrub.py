"""A copy of a validated nsys export without the profiled job's captured environment: what the service keeps.

The environment lives in three places (``TARGET_INFO_SYSTEM_ENV``, ``META_DATA_CAPTURE`` one variable per
row, and ``StringIds``, where NUL-joined blocks and single ``K=V`` strings sit), and the export metadata
names the exporting user, host and paths. A copy of the file is edited through a hardened connection
(defensive mode, no triggers or views, untrusted schema, a deadline, ``secure_delete``), then rebuilt by
SQLite itself (``VACUUM INTO``), so no removed value survives in free or reused pages. It keeps everything Goodput reads (the allow-listed job facts among them), so it
ingests to the same findings; ``scrub`` validates it again before publishing it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import apsw

from analysis.duck import publish
from analysis.errors import TraceError
from analysis.readers.nsys.env import ALLOWED_KEYS, allowed_value
from analysis.readers.nsys.guard import ExportInfo, harden, validate

# TARGET_INFO_SYSTEM_ENV rows kept as they are (descriptions of the machine, never of the job); every other
# row goes, except DeviceEnvironment, which is rewritten to its allow-listed variables.
KEPT_SYSTEM_ENV = frozenset(("CpuCores", "CpuArchitecture", "CpuDescription", "OsDescription", "HardwarePlatform",
                             "SoftwarePlatform", "NvDriverVersion", "CudaDriverVersion", "Hostname", "GpuInfo"))
# Export metadata kept; every other value (user, host, input and output paths, options) is blanked.
KEPT_META = re.compile(r"EXPORT_(PRODUCT_VERSION|SCHEMA_VERSION\w*|TIME_UTC|PARAM_TIME_NORMALIZE|TIME_NORMALIZE"
                       r"|CONFIG_TIME_SHIFT)|DERIVED_\w+\Z")
# StringIds the reader resolves: these stay whatever they look like (an NVTX text may read "LR=0.1").
# Every other string is blanked, whatever it holds (a token in an unreferenced string, a PEM key).
READ_REFERENCES = (("CUPTI_ACTIVITY_KIND_KERNEL", ("shortName", "demangledName", "mangledName")),
                   ("NVTX_EVENTS", ("textId",)), ("CUPTI_ACTIVITY_KIND_RUNTIME", ("nameId",)),
                   ("OSRT_API", ("nameId",)), ("PROFILER_OVERHEAD", ("nameId",)), ("ThreadNames", ("nameId",)),
                   ("SAMPLING_CALLCHAINS", ("symbol", "module")))
_SEPARATORS = re.compile(r"[;\x00\n]")
# Free-text descriptions of the machine Goodput keeps but never reads, and process names: text appended to
# them (after a control character or ';', or from the first word holding '=') is not kept. The same
# pattern (RE2 syntax) cuts process names when they are normalized, so the trace and the kept copy agree.
APPENDED = r"(?s)([\x00-\x1f;]|(^|\s)\S*=).*$"
_APPENDED = re.compile(APPENDED)
DESCRIPTIONS = frozenset(("CpuDescription", "OsDescription", "HardwarePlatform", "SoftwarePlatform", "GpuInfo",
                          "CpuArchitecture", "NvDriverVersion", "CudaDriverVersion"))


def described(text: str) -> str:
    """A description or process name without text appended to it (see ``APPENDED``), at most 256 characters."""
    return _APPENDED.sub("", text).rstrip()[:256]
_SAFE_VALUE = re.compile(r"[A-Za-z0-9._\-\[\]]{1,253}\Z")


def _temporaries(dst: Path, tag: str) -> tuple[Path, ...]:
    work = dst.parent / f".{dst.name}.{tag}.work.tmp"
    tmp = dst.parent / f".{dst.name}.{tag}.tmp"
    return (work, tmp, *(Path(f"{p}-{x}") for p in (work, tmp) for x in ("journal", "wal", "shm")))


def scrub(src: Path, dst: Path, *, expected: ExportInfo, timeout_s: float, tag: str | None = None) -> None:
    """Write ``src`` (``expected`` is what ``guard.validate`` found in it) to ``dst`` without the captured
    environment.

    ``dst`` appears atomically (a temporary name beside it, published by ``analysis.duck.publish``). Raises ``TraceError``.
    ``tag`` names the temporary files (``ScrubChild`` picks it, to remove them after killing the process).
    """
    src, dst = Path(src), Path(dst)
    deadline = time.monotonic() + timeout_s
    leftovers = _temporaries(dst, tag or uuid.uuid4().hex)
    work, tmp = leftovers[0], leftovers[1]
    try:
        # Edit a copy, then let SQLite rebuild it page by page (VACUUM INTO): secure_delete alone leaves old
        # bytes in pages that b-tree balancing reused.
        shutil.copyfile(src, work)
        _scrub_in_place(work, deadline)
        con = _open_writable(work, deadline)
        try:
            con.execute("VACUUM INTO ?", (str(tmp),))
        finally:
            con.close()
        work.unlink()
        after = validate(tmp, max_bytes=2**62, timeout_s=max(1.0, deadline - time.monotonic()))
        if after.facts != expected.facts or after.tables != expected.tables or after.meta != expected.meta:
            raise TraceError("internal", "the scrubbed copy of the export lost facts Goodput reads; "
                             "please report it with the nsys version")
        publish(tmp, dst)
    except apsw.InterruptError:
        raise TraceError("timeout", "removing the captured environment from the export took longer than the "
                         "configured limit") from None
    except apsw.FullError:
        raise TraceError("no_space", "the disk filled up while storing the export; free space and retry") from None
    except apsw.Error as exc:
        detail = " ".join(str(exc).split())[:200]
        raise TraceError("corrupt", f"SQLite refused to copy the export ({type(exc).__name__}: {detail}); "
                         "export it again") from None
    except OSError as exc:
        if exc.errno == 28:  # ENOSPC
            raise TraceError("no_space", "the disk filled up while storing the export") from None
        raise
    finally:
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)


class ScrubChild:
    """``scrub`` in a process of its own (``python -m analysis.readers.nsys.scrub``), killed at the deadline.

    The scrub loops in Python over every string of an untrusted file; in a thread of the caller, a pass that
    held the GIL would also stop the caller's other threads (a worker's lease heartbeat) and no deadline
    could fire. Here the caller only waits on a pipe, and ``wait`` kills the child when the time is up.
    """

    def __init__(self, src: Path, dst: Path, *, expected: ExportInfo, deadline: float) -> None:
        import analysis

        self.dst = Path(dst)
        self.deadline = deadline
        self.tag = uuid.uuid4().hex
        job = {"src": str(src), "dst": str(dst), "tag": self.tag, "timeout_s": max(1.0, deadline - time.monotonic()),
               "expected": {"path": str(expected.path), "size": expected.size, "tables": expected.tables,
                            "meta": expected.meta, "facts": expected.facts}}
        env = dict(os.environ)
        root = str(Path(analysis.__file__).resolve().parents[1])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "analysis.readers.nsys.scrub"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, text=True)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at start; wait() says so
        self.proc.stdin = None  # sent and closed: communicate() only reads

    def wait(self) -> None:
        """Wait for the kept copy until the deadline; raises ``TraceError`` (``timeout`` once it passed)."""
        try:
            out, err = self.proc.communicate(timeout=max(0.1, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.join()
            raise TraceError("timeout", "removing the captured environment from the export took longer than the "
                             "configured limit") from None
        try:
            answer = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        except ValueError:
            answer = {}
        if answer.get("ok"):
            return
        self._cleanup()
        if answer.get("code"):
            raise TraceError(str(answer["code"]), str(answer.get("message", "")))
        detail = " ".join((err or "").strip().splitlines()[-1:])[:200]
        raise TraceError("internal", f"removing the captured environment failed (exit {self.proc.returncode}: "
                         f"{detail}); please report it with the nsys version")

    def join(self) -> None:
        """Stop the child (if still running) and remove its temporary files."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self._cleanup()

    def _cleanup(self) -> None:
        for leftover in _temporaries(self.dst, self.tag):
            leftover.unlink(missing_ok=True)


def _child_main() -> int:
    job = json.loads(sys.stdin.readline())
    e = job["expected"]
    expected = ExportInfo(path=Path(e["path"]), size=int(e["size"]), tables=e["tables"], meta=e["meta"],
                          facts=e["facts"])
    try:
        scrub(Path(job["src"]), Path(job["dst"]), expected=expected, timeout_s=float(job["timeout_s"]),
              tag=job["tag"])
    except TraceError as exc:
        print(json.dumps({"ok": False, "code": exc.code, "message": exc.message}), flush=True)
        return 1
    print(json.dumps({"ok": True}), flush=True)
    return 0


def _open_writable(path: Path, deadline: float) -> apsw.Connection:
    con = harden(apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE), deadline)
    # Overwrite what is deleted or replaced with zeros; the rollback journal stays in memory, not on disk.
    con.execute("PRAGMA secure_delete=ON")
    con.execute("PRAGMA journal_mode=MEMORY")
    return con


def _plain_table(con: apsw.Connection, name: str, columns: tuple[str, ...]) -> bool:
    """True when ``name`` is an ordinary table with ``columns``; an export that hides one is refused."""
    rows = list(con.execute("SELECT type, sql FROM sqlite_schema WHERE name = ?", (name,)))
    if not rows:
        return False
    kind, sql = rows[0]
    if kind != "table" or str(sql or "").upper().startswith("CREATE VIRTUAL"):
        raise TraceError("unsafe_schema", f"'{name}' is not a plain table; a real nsys export never has this. "
                         "Export it again from the .nsys-rep report")
    xinfo = {col: hidden for col, hidden in con.execute("SELECT name, hidden FROM pragma_table_xinfo(?)", (name,))}
    if any(h in (2, 3) for h in xinfo.values()):
        raise TraceError("unsafe_schema", f"table '{name}' has generated columns; export it again")
    return all(c in xinfo for c in columns)


def allowed_environment(value: object) -> str:
    """The allow-listed ``K=V`` pairs of a captured environment, joined by the separator the export used
    (';' in most versions, NUL in older ones), so any reader parses the copy as it parses the original."""
    if not isinstance(value, str):
        return ""
    sep = max(";\x00\n", key=value.count) if any(c in value for c in ";\x00\n") else ";"
    kept: list[str] = []
    for item in _SEPARATORS.split(value):
        key, eq, val = item.partition("=")
        if eq and key in ALLOWED_KEYS and _SAFE_VALUE.match(val.strip()) and allowed_value(key, val.strip()) \
                and not any(k.startswith(key + "=") for k in kept):
            kept.append(f"{key}={val.strip()}")
    return sep.join(kept)


def allowed_block(text: str) -> str:
    """A NUL-joined environment block (``StringIds``) reduced to its allow-listed ``K=V`` entries, still
    NUL-joined and NUL-terminated, so the reader still takes it for a block and reads the same job facts."""
    kept: list[str] = []
    for item in text.split("\x00"):
        key, eq, val = item.partition("=")
        if eq and key in ALLOWED_KEYS and _SAFE_VALUE.match(val.strip()) and allowed_value(key, val.strip()) \
                and not any(k.startswith(key + "=") for k in kept):
            kept.append(f"{key}={val.strip()}")
    return "\x00".join(kept) + "\x00" if kept else ""


def _text(value: object) -> str:
    """A stored value as text, whatever its storage class or encoding (the file is untrusted)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _capture_row_kept(name: object, value: object) -> bool:
    if not isinstance(name, str):
        return False
    upper = name.upper()
    if "ENVIRONMENT" in upper:
        return isinstance(value, str) and allowed_environment(value.replace('"', "")) == value.replace('"', "")
    return not upper.startswith("PROCESS_") and not any(
        word in upper for word in ("ARGUMENT", "USER", "DIR", "PATH", "FILE", "HOST", "COMMAND", "ENV"))


def _scrub_in_place(path: Path, deadline: float) -> None:
    con = _open_writable(path, deadline)
    try:
        con.execute("BEGIN")
        if _plain_table(con, "TARGET_INFO_SYSTEM_ENV", ("name", "value")):
            rows = list(con.execute('SELECT rowid, CAST(name AS BLOB), CAST(value AS BLOB) FROM "TARGET_INFO_SYSTEM_ENV"'))
            for rowid, name, value in ((r, _text(n), _text(v)) for r, n, v in rows):
                if name == "DeviceEnvironment":
                    con.execute('UPDATE "TARGET_INFO_SYSTEM_ENV" SET value = ? WHERE rowid = ?',
                                (allowed_environment(value), rowid))
                elif name not in KEPT_SYSTEM_ENV:
                    con.execute('DELETE FROM "TARGET_INFO_SYSTEM_ENV" WHERE rowid = ?', (rowid,))
                elif name in DESCRIPTIONS and described(value) != value:
                    con.execute('UPDATE "TARGET_INFO_SYSTEM_ENV" SET value = ? WHERE rowid = ?',
                                (described(value), rowid))
        if _plain_table(con, "PROCESSES", ("name",)):
            for rowid, name in list(con.execute('SELECT rowid, CAST(name AS BLOB) FROM "PROCESSES"')):
                if name is not None and described(_text(name)) != _text(name):
                    con.execute('UPDATE "PROCESSES" SET name = ? WHERE rowid = ?', (described(_text(name)), rowid))
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if _plain_table(con, table, ("name", "value")):
                blank = [rowid for rowid, name in con.execute(f'SELECT rowid, CAST(name AS BLOB) FROM "{table}"')  # noqa: S608
                         if not KEPT_META.match(_text(name))]
                for rowid in blank:
                    con.execute(f'UPDATE "{table}" SET value = \'\' WHERE rowid = ?', (rowid,))  # noqa: S608
        if _plain_table(con, "META_DATA_CAPTURE", ("name", "value")):
            # Capture options stay; the launched process's arguments, user, working directory and
            # environment (PROCESS_n:... rows, one variable per row) go, but allow-listed variables.
            capture = con.execute('SELECT rowid, CAST(name AS BLOB), CAST(value AS BLOB) FROM "META_DATA_CAPTURE"')
            drop = [rowid for rowid, name, value in capture if not _capture_row_kept(_text(name), _text(value))]
            for rowid in drop:
                con.execute('DELETE FROM "META_DATA_CAPTURE" WHERE rowid = ?', (rowid,))
        if _plain_table(con, "StringIds", ("id", "value")):
            _scrub_strings(con)
        _empty_unread(con)
        con.execute("COMMIT")
    finally:
        con.close()


def _as_id(value: object) -> int | None:
    """A string id as the reader's join sees it (``TRY_CAST(.. AS BIGINT)``), None when it names nothing."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, (str, bytes)):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _scrub_strings(con: apsw.Connection) -> None:
    """Blank every ``StringIds`` value no column the reader resolves refers to (an environment block keeps
    its allow-listed entries); the referenced ones (kernel, API, NVTX, thread and function names) stay."""
    used: set[int] = set()
    for table, columns in READ_REFERENCES:
        if not _plain_table(con, table, ()):
            continue
        present = {r[0] for r in con.execute("SELECT name FROM pragma_table_info(?)", (table,))}
        for col in columns:
            if col in present:
                for (value,) in con.execute(f'SELECT DISTINCT "{col}" FROM "{table}"'):  # noqa: S608 - fixed names
                    ref = _as_id(value)
                    if ref is not None:
                        used.add(ref)
    blank = []
    for rowid, sid, value in con.execute('SELECT rowid, id, CAST(value AS BLOB) FROM "StringIds"'):
        ref = _as_id(sid)
        if ref is not None and ref in used:
            continue
        text = _text(value)
        # An environment block keeps its allow-listed facts (rank, world size...), as the reader takes
        # them from blocks too; any other unreferenced string is blanked.
        kept = allowed_block(text) if "\x00" in text else ""
        if kept != text:
            blank.append((kept, rowid))
    for kept, rowid in blank:
        con.execute('UPDATE "StringIds" SET value = ? WHERE rowid = ?', (kept, rowid))


def _empty_unread(con: apsw.Connection) -> None:
    """Tables Goodput never reads lose their rows (their names stay: one may mark the file as an nsys
    export), and in the tables it reads, the strings of columns it does not read go (``ANALYSIS_FILE`` names
    the user's paths, ``TARGET_INFO_*`` rows carry free text)."""
    from analysis.readers.nsys.source import SOURCE_TABLES

    tables = [name for (name,) in con.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
    for name in tables:
        spec = SOURCE_TABLES.get(name)
        if spec is None:
            if _plain_table(con, name, ()):
                con.execute(f'DELETE FROM "{_ident(name)}"')  # noqa: S608 - quoted name from the schema
            continue
        if not _plain_table(con, name, ()):
            continue
        for col, notnull in list(con.execute("SELECT name, \"notnull\" FROM pragma_table_info(?)", (name,))):
            if col in spec.columns:
                continue
            empty = "''" if notnull else "NULL"
            con.execute(f'UPDATE "{_ident(name)}" SET "{_ident(col)}" = {empty} '  # noqa: S608 - quoted names
                        f'WHERE typeof("{_ident(col)}") IN (\'text\', \'blob\')')


def _ident(name: str) -> str:
    return str(name).replace('"', '""')


if __name__ == "__main__":
    sys.exit(_child_main())
