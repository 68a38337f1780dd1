"""Enqueue worker tasks by name with a Celery client built from Settings; `app` never imports `workers`.

Call these only AFTER the database transaction that created the job has committed: the worker
claims the row by id, and a message that arrives before the commit would find nothing to claim
(reconcile re-queues such a job anyway, but later).
"""

from __future__ import annotations

import logging
import threading

from celery import Celery
from kombu import Exchange, Queue

from app.settings import Settings

logger = logging.getLogger(__name__)

# Task names and queues: the contract with `workers/` (which registers the same names).
INGEST_TASK = "ingest.report"
ANALYZE_TASK = "analyze.run"
ANALYZE_REPORT_TASK = "analyze.report"
PURGE_TASK = "purge.run"
RECONCILE_TASK = "reconcile.leases"
INGEST_QUEUE = "ingest"
LIGHT_QUEUE = "light"

_clients: dict[str, Celery] = {}


def task_queues() -> list[Queue]:
    """The two queues, each on its own direct exchange; producer and worker declare them the same way."""
    return [Queue(name, Exchange(name, type="direct"), routing_key=name) for name in (INGEST_QUEUE, LIGHT_QUEUE)]


def broker_options(url: str, **redis_options: object) -> dict[str, object]:
    """Transport options for ``url``: the SQLAlchemy transport passes them to create_engine, so none there."""
    return dict(redis_options) if url.startswith(("redis", "rediss")) else {}
_lock = threading.Lock()


def celery_client(settings: Settings) -> Celery:
    """A producer-only Celery app for ``settings.resolved_broker_url``, built once per broker URL."""
    url = settings.resolved_broker_url
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = Celery("goodput-producer", broker=url, set_as_current=False)
            client.conf.update(
                task_ignore_result=True,
                # A web request must not hang when the broker is down: fail fast, reconcile re-queues.
                broker_connection_retry=False,
                broker_transport_options={"max_retries": 2, "interval_start": 0, "interval_step": 0.2},
                task_queues=task_queues(),
                task_default_queue=LIGHT_QUEUE,
            )
            _clients[url] = client
        return client


def _send(settings: Settings, name: str, arg: int | str, queue: str) -> bool:
    """Send one task; False (logged) when the broker is unreachable, since reconcile re-queues the job."""
    try:
        celery_client(settings).send_task(name, args=[arg], queue=queue, retry=False)
    except Exception:  # the DB row is the truth; a lost message is recovered by reconcile
        logger.warning("could not enqueue %s(%s); reconcile will re-queue it", name, arg, exc_info=True)
        return False
    return True


def enqueue_ingest(settings: Settings, report_id: int | str) -> bool:
    """Queue the ingest of one report on the heavy ``ingest`` queue."""
    return _send(settings, INGEST_TASK, report_id, INGEST_QUEUE)


def enqueue_analyze_report(settings: Settings, report_id: int | str) -> bool:
    """Queue one report's own analysis on the heavy ``ingest`` queue: it reads the whole trace."""
    return _send(settings, ANALYZE_REPORT_TASK, report_id, INGEST_QUEUE)


def enqueue_analyze(settings: Settings, run_id: int | str) -> bool:
    """Queue the analysis of one run on the ``light`` queue."""
    return _send(settings, ANALYZE_TASK, run_id, LIGHT_QUEUE)


def enqueue_purge(settings: Settings, run_id: int | str) -> bool:
    """Queue the removal of a deleted run's files on the ``light`` queue."""
    return _send(settings, PURGE_TASK, run_id, LIGHT_QUEUE)
