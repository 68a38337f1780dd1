"""Checks the reliability tests share: what is left under data_dir, and whether a secret is stored anywhere."""

from __future__ import annotations

import hashlib
from pathlib import Path

from analysis.views.run_overview import LANES_VERSION
from analysis.views.run_overview import VERSION as OVERVIEW_VERSION


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stored_files(data_dir: Path) -> list[str]:
    """Every file under data_dir but the service's own state (broker, beat schedule, secret key)."""
    skip = ("broker.sqlite", "celerybeat-schedule", "secret_key", "goodput.sqlite")
    return sorted(p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*")
                  if p.is_file() and not p.name.startswith(skip))


def files_holding(data_dir: Path, needle: str) -> list[str]:
    """Files under data_dir whose bytes contain ``needle``."""
    raw = needle.encode()
    return [p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*") if p.is_file() and raw in p.read_bytes()]


def report_files(data_dir: Path, report: dict, kept: bool = True) -> list[str]:
    """What one finished report should leave: its trace (with the timeline overview, lane catalogue and
    published analysis of an nsys report), and its export kept without the environment."""
    sha = report["sha256"]
    trace = [f"reports/{report['id']}/trace.duckdb"]
    if report.get("kind", "nsys") == "nsys":
        trace.append(f"reports/{report['id']}/trace.overview-v{OVERVIEW_VERSION}.parquet")
        # Its own analysis (the per-report step): one published folder, none left by earlier attempts.
        folders = sorted((data_dir / "reports" / str(report["id"])).glob("analysis-*"))
        assert len(folders) == 1, folders
        trace += [f"reports/{report['id']}/{folders[0].name}/{name}" for name in ("analysis.json", "collectives.parquet")
                  if (folders[0] / name).exists()]
        trace.append(f"reports/{report['id']}/trace.lanes-v{LANES_VERSION}.json")
    return sorted(trace + ([f"uploads/{sha[:2]}/{sha}.kept.sqlite"] if kept else []))
