"""Runs' job state (claims, leases, reconcile, derived statuses, re-analysis, threshold overrides), result
persistence, operations (retry, re-ingest, sweeps) and purges."""
