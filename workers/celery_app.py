"""The Celery application factory: queues, reliability switches, time limits and the beat schedule."""

from __future__ import annotations

from celery import Celery

from app.queue import (
    ANALYZE_REPORT_TASK,
    ANALYZE_TASK,
    INGEST_QUEUE,
    INGEST_TASK,
    LIGHT_QUEUE,
    PURGE_TASK,
    RECONCILE_TASK,
    broker_options,
    task_queues,
)
from app.settings import Settings


def make_celery(settings: Settings) -> Celery:
    """A configured Celery app with Goodput's tasks registered; nothing connects until it is used."""
    app = Celery("goodput", broker=settings.resolved_broker_url, set_as_current=False)
    ingest_limit = settings.ingest_timeout_seconds
    app.conf.update(
        task_ignore_result=True,
        # The metadata DB owns job state: a message is acknowledged only after the task finished,
        # and one lost with its worker goes back to the queue (the attempt counter bounds the loop).
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_queues=task_queues(),
        task_default_queue=LIGHT_QUEUE,
        task_routes={
            INGEST_TASK: {"queue": INGEST_QUEUE},
            ANALYZE_TASK: {"queue": LIGHT_QUEUE},
            ANALYZE_REPORT_TASK: {"queue": INGEST_QUEUE},
            PURGE_TASK: {"queue": LIGHT_QUEUE},
            RECONCILE_TASK: {"queue": LIGHT_QUEUE},
        },
        task_serializer="json",
        accept_content=["json"],
        # Redis re-delivers an unacknowledged message after the visibility timeout; it must exceed the
        # longest task, or a second worker would start on a job that is still running.
        broker_transport_options=broker_options(
            settings.resolved_broker_url, visibility_timeout=ingest_limit + 2 * settings.lease_seconds + 60),
        broker_connection_retry_on_startup=True,
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
        beat_schedule={
            "reconcile": {
                "task": RECONCILE_TASK,
                "schedule": float(max(1, settings.reconcile_interval_seconds)),
                "options": {"queue": LIGHT_QUEUE, "expires": max(1, settings.reconcile_interval_seconds)},
            },
        },
    )
    app.goodput_settings = settings  # read by the tasks (ids in, settings from the app that runs them)
    from workers.tasks import LIGHT_TIME_LIMIT_S, register_tasks

    register_tasks(app, ingest_limit=ingest_limit, light_limit=LIGHT_TIME_LIMIT_S)
    return app
