"""The storage interface: the settings choose the backend, the local backend keeps today's layout, and the
storage layer raises its own typed errors (never HTTP ones), which the API maps to its error codes."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import pytest

from app.errors import ERROR_STATUS, ApiError
from app.services.storage import (
    BACKENDS,
    BadUpload,
    LocalStorage,
    Storage,
    StorageError,
    StorageFull,
    UploadTooLarge,
    storage_for,
)
from app.settings import STORAGE_BACKENDS, Settings, SettingsError


def test_settings_choose_the_backend_and_refuse_an_unknown_one(tmp_path):
    settings = Settings.from_env({"GOODPUT_DATA_DIR": str(tmp_path)})
    assert settings.storage == "local" and set(BACKENDS) == set(STORAGE_BACKENDS)
    storage = storage_for(settings)
    assert isinstance(storage, Storage) and isinstance(storage, LocalStorage) and storage.root == tmp_path
    with pytest.raises(SettingsError, match="GOODPUT_STORAGE"):
        Settings.from_env({"GOODPUT_STORAGE": "s3"})


def test_local_storage_stores_by_content_and_removes_what_it_stored(tmp_path):
    storage = LocalStorage(tmp_path)
    body = b"NSYS-REP fake report\x00" + bytes(100)
    sink = storage.open_sink(10_000, "dir/a.nsys-rep.gz")
    sink.write(gzip.compress(body))
    staged = sink.finish()
    key = storage.store(staged)
    sha = hashlib.sha256(body).hexdigest()
    assert key == f"uploads/{sha[:2]}/{sha}.nsys-rep" and storage.exists(key)
    with storage.open(key) as f:
        assert f.read() == body
    assert [k for k, _ in storage.list_uploads()] == [key]
    storage.trace_path(7).parent.mkdir(parents=True)
    storage.trace_path(7).write_bytes(b"x")
    assert storage.remove_report(7) and not storage.remove_report(7)
    assert storage.remove(key) and not storage.remove(key) and not storage.exists(key)


@pytest.mark.parametrize(("body", "error", "code"), [
    (bytes(2000), UploadTooLarge, "TOO_LARGE"),
    (gzip.compress(bytes(100), mtime=0)[:20], BadUpload, "BAD_COMPRESSION"),
])
def test_the_sink_raises_typed_storage_errors_with_the_api_codes(tmp_path, body, error, code):
    sink = LocalStorage(tmp_path).open_sink(1000, "a.sqlite")
    try:
        with pytest.raises(error) as raised:
            sink.write(body)
            sink.finish()
    finally:
        sink.discard()
    exc = raised.value
    assert isinstance(exc, StorageError) and not isinstance(exc, ApiError) and exc.code == code
    assert ApiError.from_storage_error(exc).status == ERROR_STATUS[code]


def test_every_storage_error_code_is_an_api_error_code():
    assert {StorageFull.code, UploadTooLarge.code, BadUpload.code, "BAD_REQUEST"} <= set(ERROR_STATUS)
    assert (ApiError.from_storage_error(StorageFull("full")).status, ApiError.from_storage_error(
        BadUpload("short", code="BAD_REQUEST")).status) == (507, 400)


def test_resolve_and_key_of_are_the_one_way_between_keys_and_paths(tmp_path):
    from app.services.storage import LocalStorage

    storage = LocalStorage(tmp_path / "data")
    path = storage.trace_path(7)
    assert storage.resolve("reports/7/trace.duckdb") == path.resolve() and path.resolve().is_absolute()
    assert storage.key_of(path) == "reports/7/trace.duckdb"
    assert storage.key_of(storage.resolve("uploads/ab/abc.sqlite")) == "uploads/ab/abc.sqlite"
    with pytest.raises(ValueError):
        storage.key_of(tmp_path / "elsewhere" / "x")


# A stored key joined onto the data folder by hand (``data_dir / key``, ``Path(data_dir, key)``,
# ``os.path.join(data_dir, key)``, ``root / report.trace_path``) rather than through ``Storage.resolve``, or a path
# made a key by hand (``path.relative_to(data_dir)``) rather than through ``Storage.key_of``. A quoted name after
# ``data_dir /`` is the app's own file there (the secret key, the SQLite metadata DB), not a stored key.
HAND_JOIN = re.compile(r"""(?<![`\w])data_dir\)?\s*/\s*(?!["'\s])|data_dir\)?\.joinpath\(|(?:os\.path\.join|Path)\([^)]*data_dir\s*,"""
                       r"""|/\s*(?:\w+\.)+(?:trace|upload|analysis)_path\b(?!\s*\()|\.relative_to\([^)]*data_dir""")
ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "app" / "services" / "storage"


def _hand_joins() -> list[str]:
    return [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for d in ("app", "workers") for p in sorted((ROOT / d).rglob("*.py")) if STORAGE not in p.parents
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if not line.lstrip().startswith("#") and HAND_JOIN.search(line)]


def test_no_code_outside_storage_builds_a_path_into_the_data_folder():
    """``Storage.resolve`` is the one way from a stored key to a path and ``Storage.key_of`` the one way back
    (docs/security.md, docs/architecture.md)."""
    assert _hand_joins() == []


def test_the_path_guard_finds_what_it_forbids():
    for line in ("paths = [Path(data_dir) / path if path else None for data, path in rows]",
                 "p = settings.data_dir / rel", "Path(settings.data_dir, report.trace_path)",
                 "os.path.join(data_dir, key)", "root / report.upload_path", "settings.data_dir.joinpath(key)",
                 "rel = str(Path(trace_file).resolve().relative_to(Path(data_dir).resolve()))",
                 "key = out.relative_to(settings.data_dir)"):
        assert HAND_JOIN.search(line), line
    for line in ('Path(settings.data_dir) / "secret_key"', "data_path(settings, report.trace_path)",
                 "storage.trace_path(7)", "storage.resolve(report.analysis_path)", "rel = storage.key_of(trace_file)",
                 "multipart parts spool to ``data_dir/staging``"):
        assert not HAND_JOIN.search(line), line
