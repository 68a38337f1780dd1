"""NCCL debug logs (``NCCL_DEBUG=INFO``, nccl-tests output) as an input: sniff, ingest to DuckDB, load back.

The interface the pipeline calls: ``looks_like_nccl_log(head)``, ``ingest(src, out, progress=None)``,
``load(path) -> NcclLog`` and ``NcclLog.to_json()`` (the run's network path).
"""

from __future__ import annotations

from analysis.readers.nccl.ingest import MAX_LOG_BYTES, ingest, looks_like_nccl_log, parse_file
from analysis.readers.nccl.lines import normalize_version
from analysis.readers.nccl.model import NcclLog
from analysis.readers.nccl.store import load

__all__ = ["MAX_LOG_BYTES", "NcclLog", "ingest", "load", "looks_like_nccl_log", "normalize_version", "parse_file"]
