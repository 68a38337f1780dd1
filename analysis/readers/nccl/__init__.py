"""NCCL debug logs (``NCCL_DEBUG=INFO``, nccl-tests output) as an input: sniff, ingest to DuckDB, load back.

The interface the pipeline calls: ``looks_like_nccl_log(head)``, ``ingest(src, out, progress=None)``,
``load(path) -> NcclLog``, ``load_job([(path, label), ..]) -> Job`` (several logs of one job, one per rank,
as one) and ``NcclLog.path()`` (the run's network path, ``analysis.network_path``).
"""

from __future__ import annotations

from analysis.readers.nccl.ingest import MAX_LOG_BYTES, ingest, looks_like_nccl_log, parse_file
from analysis.readers.nccl.lines import normalize_version
from analysis.readers.nccl.merge import Job, LeftOut, load_job
from analysis.readers.nccl.model import NcclLog
from analysis.readers.nccl.store import load

__all__ = ["MAX_LOG_BYTES", "Job", "LeftOut", "NcclLog", "ingest", "load", "load_job", "looks_like_nccl_log", "normalize_version", "parse_file"]
