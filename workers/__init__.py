"""Goodput's Celery workers: tasks that claim a job under a lease, call `analysis` under a heartbeat, and persist
the result or the classified failure."""
