"""Many-rank benchmark: a run of R ranks, from the last upload to the run being ready.

Each rank is a replicated real export: ``nccl-ring-2node-r0`` (even ranks) or ``-r1`` (odd) grown by
``make_big_export.py`` to ``--copies`` copies of its activity (one NCCL all-reduce per copy), then given
its own rank, clock and arrival jitter, one rank delayed (``tests/analysis/many_ranks.py``). The run is
uploaded in one request to a real service (gunicorn, Celery workers on a private redis-server, SQLite
metadata DB), and timed from the upload's response to the run being ``ready``, for:

* ``fan-out, 1 worker`` and ``fan-out, 2 workers``: this code (one ``analyze.report`` task per report
  after its ingest, the run-level step once over the facts);
* ``single task, 2 workers``: the previous code (``--previous``, default a71133d, checked out into a
  temporary folder): ingest on the workers, then one ``analyze.run`` task reading every report.

Then, each in its own process so its peak RSS is its own: the run-level step alone over the published
per-report analyses (``analysis.run.runner.analyze_run_facts``), and the previous single-task analysis
alone over the same DuckDB files. The fan-out's findings are compared with the previous path's.

    .venv/bin/python benchmarks/many_ranks.py                      # 64 ranks, 4 copies each
    .venv/bin/python benchmarks/many_ranks.py --ranks 64 --copies 40
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._server import free_port  # noqa: E402
from benchmarks.make_big_export import build  # noqa: E402
from tests.analysis.many_ranks import R0, R1, build_rank  # noqa: E402
from tests.conftest import corpus_file  # noqa: E402
from tests.e2e.services import RedisServer, wait_for  # noqa: E402

PREVIOUS = "a71133d"


def _cli(code: Path) -> list[str]:
    return [sys.executable, "-c", "import sys; from goodput_cli.main import main; sys.exit(main())"]


def _env(code: Path, data: Path, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env.update({"PYTHONPATH": str(code), "GOODPUT_DATA_DIR": str(data),
                "GOODPUT_DATABASE_URL": f"sqlite:///{data / 'goodput.db'}", "GOODPUT_BROKER_URL": redis_url,
                "GOODPUT_SECRET_KEY": "bench", "GOODPUT_LEASE_SECONDS": "60"})
    return env


def service_run(code: Path, files: list[Path], workers: int, work: Path) -> dict:
    """Upload ``files`` as one run to a fresh service running ``code`` with ``workers`` worker processes;
    returns the seconds from the upload's response to the run being ready, and the run's ids."""
    data = work / "data"
    data.mkdir(parents=True)
    redis = RedisServer(work)
    redis.start()
    env = _env(code, data, redis.url)
    procs: list[subprocess.Popen] = []
    try:
        subprocess.run([*_cli(code), "migrate"], env=env, cwd=code, check=True, capture_output=True)
        token = subprocess.run([*_cli(code), "token", "create", "--name", "bench", "--scope", "write"], env=env,
                               cwd=code, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}",
                                       "app:create_app()"], env=env, cwd=code, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        log = open(work / "worker.log", "wb")
        procs.append(subprocess.Popen([*_cli(code), "worker", "--concurrency", str(workers), "--loglevel", "INFO"],
                                      env=env, cwd=code, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        url = f"http://127.0.0.1:{port}/api/v1"
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {token}"
        wait_for(lambda: _up(http, url), 60, "the web server")
        wait_for(lambda: b"ready." in (work / "worker.log").read_bytes(), 60, "the worker")
        handles = [f.open("rb") for f in files]
        try:
            resp = http.post(f"{url}/runs", data={"job": "many-ranks"},
                             files=[("files", (f.name, h)) for f, h in zip(files, handles, strict=True)])
        finally:
            for h in handles:
                h.close()
        resp.raise_for_status()
        t0 = time.monotonic()
        run_id = resp.json()["id"]
        run = wait_for(lambda: (r := http.get(f"{url}/runs/{run_id}").json())["status"] in ("ready", "failed") and r,
                       7200, "the run", interval=0.25)
        elapsed = time.monotonic() - t0
        findings, page = [], 1
        while True:
            got = http.get(f"{url}/runs/{run_id}/findings", params={"page_size": 200, "page": page}).json()
            findings += got["items"]
            if len(findings) >= got["total"] or not got["items"]:
                break
            page += 1
        return {"seconds": elapsed, "status": run["status"], "run_id": run_id, "data": data,
                "findings": [(f["rule_id"], f["report"], f["rank"], f["impact_ns"], f["title"]) for f in findings],
                "reports": {r["id"]: r["name"] for r in run["reports"]}}
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, 15)
                p.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, 9)
        redis.stop()


def _up(http: requests.Session, url: str) -> bool:
    try:
        return http.get(f"{url}/health", timeout=5).status_code in (200, 503)
    except requests.RequestException:
        return False


def _measure(code: Path, snippet: str, arg: dict) -> dict:
    """Run ``snippet`` (it reads ``ARG`` and sets ``OUT``) in a fresh process on ``code``: wall time and peak RSS."""
    # Peak RSS from VmHWM: ru_maxrss would carry this (parent) process's peak over fork and exec.
    prog = ("import json, re, sys, time\nARG = json.loads(sys.argv[1])\nt0 = time.monotonic()\n" + snippet
            + "\nhwm = int(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)) * 1024"
              "\nprint(json.dumps({'seconds': time.monotonic() - t0, 'peak_rss': hwm, 'out': OUT}))")
    out = subprocess.run([sys.executable, "-c", prog, json.dumps(arg)], env={**os.environ, "PYTHONPATH": str(code)},
                         cwd=code, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


RUN_LEVEL = """
from pathlib import Path
from analysis.run.runner import ReportResult, analyze_run_facts, make_context
ctx = make_context()
res = analyze_run_facts([ReportResult.load(Path(p)) for p in ARG['folders']], ctx).to_json()
OUT = {'findings': len(res['findings']), 'per_rank_rows': sum(len(f.get('per_rank') or []) for f in res['findings']),
       'result_json_bytes': len(json.dumps(res))}
"""


def _run_step_only(files: list[Path], work: Path) -> int:
    """Each rank ingested and analyzed (step 1) in this process, then the run-level step alone, fresh."""
    from analysis.api import Limits, ingest
    from analysis.run.runner import analyze_report, make_context

    t = time.monotonic()
    traces = []
    for f in files:
        out = work / "duck" / (f.stem + ".duckdb")
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():  # a rerun over the same folder (without main's clean start) keeps its ingests
            ingest(f, out, limits=Limits(timeout_s=3600))
        traces.append(out)
    ctx = make_context()
    folders = []
    for i, (f, trace) in enumerate(zip(files, traces, strict=True)):
        folder = work / "facts" / str(i)
        analyze_report(trace, f.name, ctx, folder).save(folder)  # what each analyze.report task publishes
        folders.append(str(folder))
    print(f"ingested and analyzed {len(files)} ranks ({time.monotonic() - t:.0f} s)", flush=True)
    out = {"ranks": len(files), "cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 1),
           "imports_only": _measure(ROOT, "import analysis.run.runner\nimport duckdb\nOUT = {}", {}),
           "run_level": [_measure(ROOT, RUN_LEVEL, {"folders": folders}) for _ in range(3)],
           "facts_bytes": sum(p.stat().st_size for d in folders for p in Path(d).iterdir()),
           "traces_bytes": sum(p.stat().st_size for p in traces)}
    print(json.dumps(out, indent=2))
    return 0
SINGLE = """
from analysis.run.runner import analyze_run
res = analyze_run(ARG['traces'], labels=ARG['labels'], window=ARG.get('window')).to_json()
OUT = {'findings': len(res['findings']), 'keys': [[f['rule_id'], f['report'], f['impact_ns'], f['title']]
                                                  for f in res['findings']]}
"""


def _published(data: Path) -> tuple[list[str], list[str], list[str]]:
    """(analysis folders, trace files, labels) of the run's reports in rank order, from the metadata DB."""
    import sqlite3

    con = sqlite3.connect(data / "goodput.db")
    rows = con.execute("SELECT analysis_path, trace_path, name FROM reports ORDER BY rank, id").fetchall()
    con.close()
    return ([str(data / r[0]) for r in rows if r[0]], [str(data / r[1]) for r in rows], [r[2] for r in rows])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--copies", type=int, default=4, help="copies of the base export's activity per rank")
    ap.add_argument("--previous", default=PREVIOUS, help="the commit of the single-task path (default %(default)s)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "goodput-many-ranks")
    ap.add_argument("--skip", default="", help="comma-separated configurations to skip: fan1,fan2,single")
    ap.add_argument("--run-step-only", action="store_true",
                    help="no service: ingest and analyze each rank in this process, then time the run-level step "
                         "alone (time, peak RSS, facts' bytes, findings and their per_rank rows)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    t = time.monotonic()
    bases = [args.dir / "base-r0.sqlite", args.dir / "base-r1.sqlite"]
    for src, dst in zip((corpus_file(R0), corpus_file(R1)), bases, strict=True):
        build(src, dst, args.copies)
    files = []
    for k in range(args.ranks):
        files.append(build_rank(args.dir / "ranks" / f"rank{k:03d}.sqlite", k, args.ranks, delayed=k == args.ranks // 2,
                                collectives=1, base=bases[k % 2]))
    size = sum(f.stat().st_size for f in files)
    print(f"built {args.ranks} ranks, {size / 2**20 / args.ranks:.1f} MiB each ({time.monotonic() - t:.0f} s)",
          flush=True)
    if args.run_step_only:
        return _run_step_only(files, args.dir)
    previous = args.dir / "previous"
    previous.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.previous], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(previous)], input=archive, check=True)
    results = {}
    for name, code, workers in (("fan1", ROOT, 1), ("fan2", ROOT, 2), ("single", previous, 2)):
        if name in skip:
            continue
        results[name] = service_run(code, files, workers, args.dir / name)
        print(f"{name}: {results[name]['seconds']:.1f} s from upload to {results[name]['status']}", flush=True)
    last = results.get("fan2") or results.get("fan1")
    out = {"ranks": args.ranks, "copies": args.copies, "mib_per_rank": round(size / 2**20 / args.ranks, 2),
           "cpus": os.cpu_count(), "python": platform.python_version(),
           "seconds": {k: round(v["seconds"], 2) for k, v in results.items()}}
    if last is not None:
        folders, traces, labels = _published(last["data"])
        # The interpreter with the analysis library imported: what any step costs before it reads anything.
        out["imports_only"] = _measure(ROOT, "import analysis.run.runner\nimport duckdb\nOUT = {}", {})
        out["run_level"] = _measure(ROOT, RUN_LEVEL, {"folders": folders})
        out["facts_bytes"] = sum(f.stat().st_size for d in folders for f in Path(d).iterdir())
        single = _measure(previous, SINGLE, {"traces": traces, "labels": labels})
        out["single_task_analysis"] = {**single, "out": {"findings": single["out"]["findings"]}}
        # The fan-out judges each rank on its own steady window, the previous path on the ranks' common one;
        # on the whole reports (window "all") the two must agree finding for finding.
        both = [_measure(code, SINGLE, {"traces": traces, "labels": labels, "window": "all"})["out"]["keys"]
                for code in (ROOT, previous)]
        out["same_findings_as_previous_window_all"] = both[0] == both[1]
    if "fan1" in results and "fan2" in results:
        out["ratio_2_to_1_workers"] = round(results["fan2"]["seconds"] / results["fan1"]["seconds"], 3)
    if last is not None and "single" in results:
        out["same_findings_as_previous"] = last["findings"] == results["single"]["findings"]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    sys.exit(main())
