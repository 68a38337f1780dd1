"""The local filesystem backend: the layout under data_dir (staging/, uploads/<sha[:2]>/<sha><suffix>,
reports/<id>/trace.duckdb and its sidecars)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path

from app.services.storage.base import Storage
from app.services.storage.sink import Staged, UploadSink, safe_suffix

# The kept export: uploads/<sha[:2]>/<sha of the upload> + this, an SQLite export without the captured env.
KEPT_SUFFIX = ".kept.sqlite"
TRACE_NAME = "trace.duckdb"
# The run timeline's overview and lane catalogue beside a trace (analysis.views.run_overview), published by rename.
PUBLISHED_OVERVIEW = re.compile(r"trace\.(overview-v\d+\.parquet|lanes-v\d+\.json)")
# A report's own analysis, one folder per attempt: the analysis task removes those of other attempts once it
# publishes its own (the metadata DB names the published one), so sweeps keep them all.
ANALYSIS_FOLDER = re.compile(r"analysis-[A-Za-z0-9-]+")
# A staged file untouched this long, and locked by nobody, belongs to an upload whose receiver died.
STAGING_IDLE_S = 60.0
SHA256 = re.compile(r"[0-9a-f]{64}")


class LocalStorage(Storage):
    """The layout under data_dir: staging/, uploads/<sha[:2]>/<sha>, reports/<id>/trace.duckdb."""

    def __init__(self, data_dir: Path | str) -> None:
        self.root = Path(data_dir)
        self.staging = self.root / "staging"
        self.uploads = self.root / "uploads"
        self.reports = self.root / "reports"

    def open_sink(self, max_bytes: int, filename: str = "") -> UploadSink:
        self.staging.mkdir(parents=True, exist_ok=True)
        label = re.split(r"[\\/]", filename)[-1][:200] or "upload"
        suffix = safe_suffix(filename)
        return UploadSink(self.staging / f"{uuid.uuid4().hex}{suffix}", max_bytes, label, suffix)

    def store(self, staged: Staged) -> str:
        """Move a staged file to its content address; returns the path relative to data_dir.

        The name keeps the upload's known suffix: the worker tells a binary .nsys-rep by it.
        """
        rel = Path(self.upload_key(staged))
        dest = self.root / rel
        if dest.exists():
            staged.path.unlink(missing_ok=True)  # same bytes already stored
            os.utime(dest)  # in use again: the sweep of unneeded uploads leaves recent files alone
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged.path, dest)
        return rel.as_posix()

    def path(self, rel: str) -> Path:
        return self.root / rel

    def key_of(self, path: Path) -> str:
        return Path(path).resolve().relative_to(self.root.resolve()).as_posix()

    def exists(self, rel: str) -> bool:
        return self.path(rel).is_file()

    def remove(self, rel: str) -> bool:
        path = self.path(rel)
        if not path.is_file():
            return False
        path.unlink(missing_ok=True)
        return True

    def list_uploads(self) -> Iterator[tuple[str, float]]:
        for f in self.uploads.glob("*/*") if self.uploads.is_dir() else ():
            try:
                if f.is_file():
                    yield f.relative_to(self.root).as_posix(), f.stat().st_mtime
            except FileNotFoundError:  # removed meanwhile
                continue

    def kept_path(self, sha256: str) -> str:
        """Where the export of these bytes is kept without its captured environment (data_dir-relative)."""
        return (Path("uploads") / sha256[:2] / f"{sha256}{KEPT_SUFFIX}").as_posix()

    def remove_abandoned_staging(self, min_idle_s: float = STAGING_IDLE_S) -> int:
        """Delete staged files no process is writing (their receiver died); returns how many."""
        removed = 0
        for f in self.staging.iterdir() if self.staging.is_dir() else ():
            try:
                if not f.is_file() or time.time() - f.stat().st_mtime < min_idle_s:
                    continue
                fd = os.open(f, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # still being received
            else:
                f.unlink(missing_ok=True)
                removed += 1
            finally:
                os.close(fd)
        return removed

    def remove_attempt_leftovers(self, report_id: int, older_than: float | None = None,
                                 sha256: str | None = None) -> int:
        """Delete what an ingest attempt left in the report's folder (temporary files of a killed worker):
        everything but the published trace, its published timeline overview and the report's analyses; and,
        given the upload's ``sha256``, the temporary files of the kept copy (``scrub``) beside the uploads.
        Call only while no attempt of this report (or of another report of the same bytes) runs, or with
        ``older_than``: then a file (or folder) changed since is kept, as an attempt that started after the
        caller looked may be writing it."""
        folder = self.report_dir(report_id)
        doomed = [f for f in (folder.iterdir() if folder.is_dir() else ())
                  if not (f.name == TRACE_NAME or PUBLISHED_OVERVIEW.fullmatch(f.name)
                          or ANALYSIS_FOLDER.fullmatch(f.name))]
        if sha256 is not None and SHA256.fullmatch(sha256):
            # scrub's temporaries: .<sha>.kept.sqlite.<tag>.work.tmp, .<...>.tmp and their -journal/-wal/-shm.
            kept = self.root / self.kept_path(sha256)
            doomed += [f for f in kept.parent.glob(f".{kept.name}.*") if ".tmp" in f.name] if kept.parent.is_dir() else []
        removed = 0
        for f in doomed:
            if older_than is not None:
                try:
                    if f.lstat().st_mtime >= older_than:
                        continue
                except FileNotFoundError:
                    continue
            if f.is_dir() and not f.is_symlink():
                shutil.rmtree(f, ignore_errors=True)
            else:
                f.unlink(missing_ok=True)
            removed += 1
        return removed

    def report_dir(self, report_id: int) -> Path:
        return self.reports / str(int(report_id))

    def trace_path(self, report_id: int) -> Path:
        return self.report_dir(report_id) / TRACE_NAME


    def remove_report(self, report_id: int) -> bool:
        folder = self.report_dir(report_id)
        if not folder.exists():
            return False
        shutil.rmtree(folder, ignore_errors=True)
        return True

    def sweep_orphans(self, known_report_ids: Collection[int], known_sha256: Collection[str], *,
                      min_age_s: float) -> int:
        removed = 0
        cutoff = time.time() - min_age_s
        known_ids = {str(i) for i in known_report_ids}
        for d in self.reports.iterdir() if self.reports.is_dir() else ():
            if d.is_dir() and d.name not in known_ids and d.stat().st_mtime < cutoff:
                shutil.rmtree(d, ignore_errors=True)
                removed += 1
        for f in self.uploads.glob("*/*") if self.uploads.is_dir() else ():
            # Stored names are the SHA-256 plus the upload's suffix (or the kept copy's).
            if f.is_file() and f.name.split(".")[0] not in known_sha256 and f.stat().st_mtime < cutoff:
                f.unlink(missing_ok=True)
                removed += 1
        for f in self.staging.iterdir() if self.staging.is_dir() else ():
            # An upload still streaming touches its file; one untouched for a day was abandoned.
            if f.is_file() and f.stat().st_mtime < min(cutoff, time.time() - 86400):
                f.unlink(missing_ok=True)
                removed += 1
        return removed
