"""Runs for UI tests, stored the way the workers store them: real ingest, real analysis, pipeline functions.

Only the Celery hop is skipped (the browser suite covers it with a real worker): each report is claimed,
ingested with ``analysis.api.ingest`` and published with ``pipeline.finish_ingest``; the run is claimed
and analyzed with ``analysis.api.analyze`` and stored with ``pipeline.finish_run_analysis``.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import IngestResult, analyze, ingest
from app.models import Job, Report, Run, User
from app.services.jobs import pipeline
from app.services.storage import storage_for
from app.settings import Settings

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = '"><img src=x onerror=alert(1)>'


class Ingested:
    """Each source export ingested once per test session; tests get copies of the DuckDB file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._done: dict[Path, tuple[Path, IngestResult]] = {}

    def get(self, src: Path) -> tuple[Path, IngestResult]:
        src = Path(src)
        if src not in self._done:
            out = self.root / f"{len(self._done)}-{src.stem}.duckdb"
            self._done[src] = (out, ingest(src, out))
        return self._done[src]


def xss_export(src: Path, out: Path) -> Path:
    """A copy of an nsys export whose strings (kernel names, NVTX text) carry HTML/JS payloads."""
    shutil.copyfile(src, out)
    con = sqlite3.connect(out)
    try:
        ids = [r[0] for r in con.execute(
            "SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION "
            "SELECT DISTINCT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL")]
        for i, sid in enumerate(ids):
            payload = XSS_SCRIPT if i % 2 == 0 else XSS_IMG
            con.execute("UPDATE StringIds SET value = ? || value WHERE id = ?", (payload + "k", sid))
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "NVTX_EVENTS" in tables:
            con.execute("UPDATE NVTX_EVENTS SET text = ? || coalesce(text, '') WHERE text IS NOT NULL",
                        (XSS_IMG,))
            con.execute("UPDATE StringIds SET value = ? || value WHERE id IN "
                        "(SELECT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL)", (XSS_SCRIPT,))
        con.commit()
    finally:
        con.close()
    return out


def store_run(session: Session, settings: Settings, ingested: Ingested, sources: list[Path], *,
              job: str = "train", tags: dict[str, str] | None = None, git_sha: str | None = None,
              submitter: str = "alice", created_at: datetime | None = None, analyze_run: bool = True) -> int:
    """A run of ``sources`` (nsys/ncu exports), ingested and analyzed; returns the run id."""
    job_row = session.scalar(sa.select(Job).where(Job.name == job)) or Job(name=job)
    # Submitted in the browser by that user when they exist (they may then change and delete it).
    user_id = session.scalar(sa.select(User.id).where(User.username == submitter))
    run = Run(job=job_row, tags=tags or {}, git_sha=git_sha, submitter=submitter, submitter_user_id=user_id,
              source="web")
    if created_at is not None:
        run.created_at = created_at
    session.add(run)
    session.flush()
    report_ids = []
    for rank, src in enumerate(sources):
        data = Path(src).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        rel = Path("uploads") / sha[:2] / sha
        (settings.data_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings.data_dir / rel).write_bytes(data)
        report = Report(run_id=run.id, name=Path(src).name, kind="nsys", rank=rank if len(sources) > 1 else None,
                        sha256=sha, size_bytes=len(data), upload_path=rel.as_posix())
        session.add(report)
        session.flush()
        report_ids.append(report.id)
    session.commit()
    owner = "test-worker/1"
    for report_id, src in zip(report_ids, sources, strict=True):
        assert pipeline.claim_report(session, report_id, owner, 60)
        cached, result = ingested.get(Path(src))
        out = pipeline.trace_path_for(settings, report_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cached, out)
        pipeline.finish_ingest(session, report_id, owner, out, result.tool, result.info, storage_for(settings))
    if analyze_run:
        finish_analysis(session, settings, run.id)
    return run.id


def finish_analysis(session: Session, settings: Settings, run_id: int) -> None:
    """Claim, analyze and persist a run whose reports are all ingested (what ``analyze.run`` does)."""
    owner = "test-worker/2"
    inputs = pipeline.claim_run_analysis(session, run_id, owner, 60)
    assert inputs is not None
    result = analyze([pipeline.data_path(settings, p) for p in inputs.paths], labels=inputs.labels, window=inputs.window,
                     thresholds=inputs.thresholds or None)  # one finding per rule across ranks, as the service
    assert pipeline.finish_run_analysis(session, run_id, owner, inputs, result)


def kernel_renamed_export(src: Path, out: Path, name: str, grid: tuple[int, int, int] | None = None,
                          block: tuple[int, int, int] | None = None) -> Path:
    """A copy of an nsys export whose most launched kernel is called ``name`` (to pair it with an ncu CSV),
    with the ncu launch's grid and block when given (ncu links a kernel by name, grid and block)."""
    shutil.copyfile(src, out)
    con = sqlite3.connect(out)
    try:
        sid = con.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName "
                          "ORDER BY count(*) DESC LIMIT 1").fetchone()[0]
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (name, sid))
        if grid is not None and block is not None:
            con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = ?, gridY = ?, gridZ = ?, blockX = ?, blockY = ?, "
                        "blockZ = ? WHERE demangledName = ?", (*grid, *block, sid))
        con.commit()
    finally:
        con.close()
    return out
