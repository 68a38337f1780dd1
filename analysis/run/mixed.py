"""What does not fit in a run of several reports: ranks of the job that no report holds, reports that claim
the same rank, reports of other jobs, and reports that lie apart on the aligned clock (another clock domain,
or another capture), so a person reads what is missing and what does not belong before the run's numbers.

Each warning is ``{"code", "message", "reports", "ranks"}``. The clock test: every report's extent (its first
to last recorded activity, its phases) placed on the run's clock by its session start; a report whose extent
overlaps no other report's, by more than ``APART_NS``, is apart: the cross-rank numbers (skew, waiting,
slowest rank) that pair it with the others compare things that did not happen together.
"""

from __future__ import annotations

from collections import defaultdict

from analysis import fmt
from analysis.report_types import ReportInfo
from analysis.results import RunWarning

APART_NS = 60 * 1_000_000_000  # a report this far from every other one did not run with them


def _extent(info: ReportInfo) -> tuple[int, int] | None:
    start = info.get("session_start_utc_ns")
    phases = info.get("phases") or []
    if not isinstance(start, int) or not phases:
        return None
    lo = min(int(p["start_ns"]) for p in phases)
    hi = max(int(p["end_ns"]) for p in phases)
    return start + lo, start + hi


def _who(info: ReportInfo) -> str:
    return f"{info['file']}" + (f" (rank {info['rank']})" if info.get("rank") is not None else "")


def run_warnings(infos: list[ReportInfo]) -> list[RunWarning]:
    """The warnings of a run from its nsys reports' summaries (``reports[]``); empty for one report."""
    nsys = [i for i in infos if i.get("tool") == "nsys"]
    if len(nsys) < 2:
        return []
    out: list[RunWarning] = []
    jobs = defaultdict(list)
    for i in nsys:
        if i.get("job_id") is not None:
            jobs[str(i["job_id"])].append(i)
    if len(jobs) > 1:
        parts = "; ".join(f"job {j}: {', '.join(_who(i) for i in members)}" for j, members in sorted(jobs.items()))
        out.append({"code": "jobs_differ", "message": f"The reports come from {fmt.count(len(jobs))} different jobs ({parts}): "
                    "their ranks did not run together.", "reports": [i["file"] for i in nsys], "ranks": []})
    sizes = {int(s) for i in nsys if isinstance(s := i.get("world_size"), int)}
    ranks: dict[int, list[str]] = defaultdict(list)
    for i in nsys:
        if isinstance(rank := i.get("rank"), int):
            ranks[int(rank)].append(i["file"])
    twice = {r: files for r, files in ranks.items() if len(files) > 1}
    for r, files in sorted(twice.items()):
        out.append({"code": "duplicate_rank", "message": f"Rank {r} is claimed by {fmt.count(len(files))} reports "
                    f"({', '.join(files)}): one of them belongs to another run.", "reports": files, "ranks": [r]})
    if len(sizes) > 1:
        out.append({"code": "world_sizes_differ", "message": f"The reports say different world sizes "
                    f"({', '.join(map(str, sorted(sizes)))}): they are ranks of different jobs.",
                    "reports": [i["file"] for i in nsys], "ranks": []})
    elif len(sizes) == 1:
        (size,) = sizes
        missing = [k for k in range(size) if k not in ranks] if size <= 100_000 else []
        if missing:
            out.append({"code": "missing_ranks", "message": f"{fmt.count(len(missing))} of the job's {fmt.count(size)} ranks have no report "
                        f"(rank(s) {_ranges(missing)}): the run's cross-rank numbers cover {fmt.count(len(ranks))} of "
                        f"{fmt.count(size)} ranks.",
                        "reports": [], "ranks": missing})
    ext = [(i, _extent(i)) for i in nsys]
    if any(e is None for _, e in ext):
        none = [i for i, e in ext if e is None]
        out.append({"code": "no_clock", "message": f"{', '.join(_who(i) for i in none)}: no session start or extent, so "
                    "it cannot be placed on the run's clock.", "reports": [i["file"] for i in none], "ranks": []})
    timed = [(i, e) for i, e in ext if e is not None]
    for i, (lo, hi) in timed:
        others = [e for j, e in timed if j is not i]
        if not others:
            continue
        gap = min(max(olo - hi, lo - ohi, 0) for olo, ohi in others)
        if gap > APART_NS:
            out.append({"code": "clock_apart", "message": f"{_who(i)} lies {fmt.duration(gap)} apart from every other "
                        "report on the aligned clock: another clock domain or another capture. Cross-rank numbers "
                        "(skew, waiting, the slowest rank, the timeline) that pair it with the others do not describe "
                        "one execution.", "reports": [i["file"]], "ranks": [rk] if (rk := i.get("rank")) is not None else []})
    return out


def _ranges(values: list[int]) -> str:
    """``0-5, 8`` for [0, 1, 2, 3, 4, 5, 8] (sorted, distinct)."""
    out: list[str] = []
    start = prev = values[0] if values else 0
    for v in values[1:]:
        if v != prev + 1:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = v
        prev = v
    if values:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(out)
