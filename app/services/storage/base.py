"""The storage interface: where uploads, kept exports and each report's trace (with its sidecars) live.

Every path a backend hands out is built from server-generated ids or SHA-256 hashes, never from client names.
Stored files are named by a key relative to the storage root (``uploads/<sha[:2]>/<sha><suffix>``), which
is what the metadata DB keeps (``reports.upload_path``). Ingest and analysis read local files (DuckDB,
SQLite), so ``path`` and ``trace_path`` give local paths; a remote backend would stage them in a local cache.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import BinaryIO

from app.services.storage.sink import Staged, UploadSink


class Storage(ABC):
    """What the services and workers need from storage; ``LocalStorage`` is today's filesystem layout."""

    # -- uploads -----------------------------------------------------------------------------------------
    @abstractmethod
    def open_sink(self, max_bytes: int, filename: str = "") -> UploadSink:
        """A new staged upload to stream into (decompressed, hashed, capped at ``max_bytes``)."""

    def upload_key(self, staged: Staged) -> str:
        """Where ``store`` puts ``staged``: its content address, keeping the upload's known suffix."""
        return f"uploads/{staged.sha256[:2]}/{staged.sha256}{staged.suffix}"

    @abstractmethod
    def store(self, staged: Staged) -> str:
        """Put a fully received staged upload at its content address; returns its key."""

    @abstractmethod
    def kept_path(self, sha256: str) -> str:
        """The key of the export of these bytes kept without its captured environment."""

    @abstractmethod
    def path(self, key: str) -> Path:
        """A local path to read the stored file ``key`` from (it may not exist)."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether the stored file ``key`` exists."""

    def resolve(self, key: str | Path) -> Path:
        """The absolute local path of the stored file or folder ``key`` (what the metadata DB keeps:
        ``reports.upload_path``, ``trace_path``, ``analysis_path``); the one place a key becomes a path."""
        return self.path(str(key)).resolve()

    @abstractmethod
    def key_of(self, path: Path) -> str:
        """The key of a local path this storage handed out (the reverse of ``resolve``); ValueError when
        the path is not inside the storage."""

    def open(self, key: str) -> BinaryIO:
        """The stored file ``key`` opened for reading."""
        return self.path(key).open("rb")

    @abstractmethod
    def remove(self, key: str) -> bool:
        """Delete the stored file ``key``; False when it was not there."""

    @abstractmethod
    def list_uploads(self) -> Iterator[tuple[str, float]]:
        """Every stored upload and kept export as (key, last-modified Unix time)."""

    # -- reports -----------------------------------------------------------------------------------------
    @abstractmethod
    def report_dir(self, report_id: int) -> Path:
        """The local folder of a report's trace and its sidecars (timeline overview, temporary files)."""

    @abstractmethod
    def trace_path(self, report_id: int) -> Path:
        """Where a report's DuckDB trace is published."""

    @abstractmethod
    def remove_report(self, report_id: int) -> bool:
        """Delete a report's trace and sidecars; False when there were none."""

    @abstractmethod
    def remove_attempt_leftovers(self, report_id: int, older_than: float | None = None,
                                 sha256: str | None = None) -> int:
        """Delete what a killed ingest attempt left beside the report's published files, and (``sha256``) the
        temporary files of the kept copy it was writing; returns how many. ``older_than`` (a time.time()):
        only files last changed before then (a newer one is a live attempt's)."""

    # -- sweeping ----------------------------------------------------------------------------------------
    @abstractmethod
    def remove_abandoned_staging(self, min_idle_s: float) -> int:
        """Delete staged uploads whose receiver died; returns how many."""

    @abstractmethod
    def sweep_orphans(self, known_report_ids: Collection[int], known_sha256: Collection[str], *,
                      min_age_s: float) -> int:
        """Delete report folders and uploads no report row refers to, and staged files abandoned for a day,
        all older than ``min_age_s``; returns how many."""
