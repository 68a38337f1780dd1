"""Storage behind an interface: ``Storage`` (base), ``LocalStorage`` (the local filesystem, today's only
backend, chosen by GOODPUT_STORAGE), the upload sink, and the storage layer's typed errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.services.storage.base import Storage
from app.services.storage.errors import BadUpload, StorageError, StorageFull, UploadTooLarge
from app.services.storage.local import (
    KEPT_SUFFIX,
    PUBLISHED_OVERVIEW,
    STAGING_IDLE_S,
    TRACE_NAME,
    LocalStorage,
)
from app.services.storage.sink import CHUNK, KNOWN_SUFFIXES, Staged, UploadSink, safe_suffix
from app.settings import STORAGE_BACKENDS, Settings

# GOODPUT_STORAGE values and their backends.
BACKENDS: dict[str, Callable[[Path], Storage]] = {"local": LocalStorage}
assert set(BACKENDS) == set(STORAGE_BACKENDS), "app.settings.STORAGE_BACKENDS names every backend"

__all__ = [
    "BACKENDS", "CHUNK", "KEPT_SUFFIX", "KNOWN_SUFFIXES", "PUBLISHED_OVERVIEW", "STAGING_IDLE_S", "TRACE_NAME",
    "BadUpload", "LocalStorage", "Staged", "Storage", "StorageError", "StorageFull", "UploadSink",
    "UploadTooLarge", "data_path", "safe_suffix", "storage_for", "trace_path_for",
]


def storage_for(settings: Settings) -> Storage:
    """The storage backend the settings choose (GOODPUT_STORAGE), rooted at data_dir."""
    return BACKENDS[settings.storage](settings.data_dir)


def data_path(settings: Settings, relative: str | Path) -> Path:
    """An absolute path under data_dir for a stored (data_dir-relative) path (``Storage.resolve``)."""
    return storage_for(settings).resolve(relative)


def trace_path_for(settings: Settings, report_id: int) -> Path:
    """Where a report's DuckDB file is published; built from the server-generated id only."""
    return storage_for(settings).trace_path(report_id).resolve()
