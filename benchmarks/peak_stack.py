"""Where an analysis step peaks: one step of ``benchmarks/analyze.py`` in this process, beside a thread that
samples the resident set every 10 ms and keeps the main thread's stack at the highest sample.

    .venv/bin/python benchmarks/peak_stack.py analyze_steady BIG.sqlite BIG.duckdb

Prints the peak (MiB), when it happened, the step's wall and CPU seconds, the stack at the peak, the resident
set over time (about 60 samples), the step's timings and each rule's impact (to compare two trees' findings).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.analyze import STEPS  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def main() -> int:
    step, src, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    main_id = threading.get_ident()
    peak: dict = {"rss": 0, "stack": [], "at": 0.0}
    samples: list[tuple[float, int]] = []
    done = threading.Event()
    t0 = time.monotonic()

    def sample() -> None:
        while not done.wait(0.01):
            rss = _rss()
            samples.append((time.monotonic() - t0, rss))
            if rss > peak["rss"]:
                frame = sys._current_frames().get(main_id)
                peak.update(rss=rss, at=time.monotonic() - t0,
                            stack=traceback.extract_stack(frame)[-10:] if frame is not None else [])

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    res = STEPS[step](src, out)
    done.set()
    thread.join()
    print(f"peak {peak['rss'] >> 20} MiB at {peak['at']:.1f} s; wall {res['wall_s']:.1f} s, CPU {res['cpu_s']:.1f} s")
    for fs in peak["stack"]:
        print(f"  {fs.filename.replace(str(ROOT) + '/', '')}:{fs.lineno} {fs.name}")
    every = max(1, len(samples) // 60)
    print("rss MiB over time:", " ".join(f"{t:.1f}:{r >> 20}" for t, r in samples[::every]))
    print("timings", json.dumps({k: round(v, 2) for k, v in res.get("timings", {}).items()}))
    print("impact", json.dumps(res.get("impact_ns", {}), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
