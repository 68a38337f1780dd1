"""Goodput's Celery workers: thin tasks that claim a job, call `analysis`, and persist the result."""
