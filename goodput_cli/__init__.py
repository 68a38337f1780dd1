"""The `goodput` command: offline analysis, ingest, and the service's processes (serve, worker)."""
