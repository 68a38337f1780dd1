"""Health: can we reach the metadata DB and the broker."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.settings import Settings


def check(session: Session, settings: Settings) -> dict:
    """``{"status": "ok"|"degraded", "database": bool, "broker": bool}``."""
    try:
        session.execute(sa.text("SELECT 1"))
        database = True
    except Exception:  # any DB failure means "unreachable" for a health probe
        session.rollback()
        database = False
    broker = _broker_ok(settings)
    return {"status": "ok" if database and broker else "degraded", "database": database, "broker": broker}


def _broker_ok(settings: Settings) -> bool:
    from app.queue import celery_client

    try:
        with celery_client(settings).connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True
    except Exception:  # unreachable broker, whatever the transport raises
        return False
