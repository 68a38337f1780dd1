"""The one typed Settings object, built from ``GOODPUT_*`` environment variables; nothing else reads them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

# GOODPUT_STORAGE values: the storage backends app.services.storage.BACKENDS implements.
STORAGE_BACKENDS = ("local",)


class SettingsError(ValueError):
    """A bad configuration value; the message names the variable."""


def _int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not an integer") from None
    if value < 0:
        raise SettingsError(f"{name}={raw!r} must not be negative")
    return value


def _bool(name: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise SettingsError(f"{name}={raw!r} is not a boolean (use true or false)")


@dataclass(frozen=True)
class Settings:
    """Service configuration. Each field maps to ``GOODPUT_<FIELD_NAME_UPPER>``."""

    # Where uploads, staged files and per-report DuckDB files live (shared by all web and worker hosts).
    data_dir: Path = Path("data")
    # Storage backend of uploads and traces (app.services.storage.BACKENDS); "local": files under data_dir.
    storage: str = "local"
    # SQLAlchemy URL of the metadata DB; empty means an SQLite file inside data_dir.
    database_url: str = ""
    # Celery broker; empty means the embedded SQLAlchemy transport on an SQLite file in data_dir.
    broker_url: str = ""
    # Secret for signing session cookies; empty means one generated and kept in data_dir.
    secret_key: str = ""
    # Largest accepted upload, in bytes (after decompression).
    max_upload_bytes: int = 20 * 1024**3
    # Seconds a worker may hold a report before reconcile hands it to another worker.
    lease_seconds: int = 900
    # Attempts before a report is failed with worker_crashed.
    max_attempts: int = 3
    # Seconds between reconcile runs (Celery beat), which re-queue expired leases and stale queued jobs.
    reconcile_interval_seconds: int = 60
    # Seconds one ingest may run before it fails with `timeout`.
    ingest_timeout_seconds: int = 3600
    # Address-space cap, in bytes, of the child process that copies an export.
    ingest_memory_bytes: int = 2 * 1024**3
    # DuckDB's memory limit, in bytes, per report during analysis (beyond it, queries spill to disk).
    analysis_memory_bytes: int = 1024**3
    # Days the stored exports (scrubbed nsys copies, ncu CSVs) are kept for retry and `goodput reingest`;
    # 0 keeps them until their run is deleted. Traces and findings are kept either way.
    keep_uploads_days: int = 0
    # Host and port `goodput serve` binds to.
    host: str = "127.0.0.1"
    port: int = 8000
    # Mark session cookies Secure (set true behind HTTPS).
    secure_cookies: bool = False
    # Seconds a web sign-in lasts at most (sign-out, a password change or disabling the user end it sooner).
    session_lifetime_seconds: int = 7 * 24 * 3600
    # Failed sign-ins allowed per user name, and per client address, within the window before 429.
    sign_in_max_failures: int = 10
    sign_in_max_failures_per_address: int = 50
    sign_in_window_seconds: int = 900
    # Milliseconds a web request waits for a metadata DB lock before answering 503 (workers wait longer).
    db_lock_timeout_ms: int = 5000
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'goodput.sqlite').resolve()}"

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{(self.data_dir / 'broker.sqlite').resolve()}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Build settings from the environment; a bad value raises SettingsError naming the variable."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            if f.name == "extra":
                continue
            var = f"GOODPUT_{f.name.upper()}"
            if var not in env:
                continue
            raw = env[var]
            default = f.default
            if isinstance(default, bool):
                values[f.name] = _bool(var, raw)
            elif isinstance(default, int):
                values[f.name] = _int(var, raw)
            elif isinstance(default, Path):
                if not raw.strip():
                    raise SettingsError(f"{var} must not be empty")
                values[f.name] = Path(raw)
            else:
                values[f.name] = raw
        settings = replace(cls(), **values, **overrides)  # type: ignore[arg-type]
        if not 1 <= settings.port <= 65535:
            raise SettingsError(f"GOODPUT_PORT={settings.port} is not a TCP port")
        if settings.storage not in STORAGE_BACKENDS:
            raise SettingsError(f"GOODPUT_STORAGE={settings.storage!r} is not one of {', '.join(STORAGE_BACKENDS)}")
        if settings.max_attempts < 1:
            raise SettingsError("GOODPUT_MAX_ATTEMPTS must be at least 1")
        for name in ("session_lifetime_seconds", "sign_in_max_failures", "sign_in_max_failures_per_address",
                     "sign_in_window_seconds", "db_lock_timeout_ms"):
            if getattr(settings, name) < 1:
                raise SettingsError(f"GOODPUT_{name.upper()} must be at least 1")
        if settings.analysis_memory_bytes < 16 * 2**20:
            raise SettingsError(f"GOODPUT_ANALYSIS_MEMORY_BYTES={settings.analysis_memory_bytes} is under 16 MiB")
        return settings


def current_settings() -> Settings:
    """The Settings of the running Flask app (set by ``create_app``)."""
    from flask import current_app

    return current_app.extensions["goodput.settings"]
