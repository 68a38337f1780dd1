"""Check that a change leaves `goodput analyze --format json` byte-identical on the whole corpus.

    .venv/bin/python scripts/corpus_identical.py take DIR     # before the change: one JSON per case into DIR
    .venv/bin/python scripts/corpus_identical.py check DIR    # after it: the same cases again, compared byte for byte

The cases are every export of ``../shared/corpus`` (nsys, ncu, NCCL logs) alone, and three runs of several files
(the two ranks of the NCCL ring, two unrelated nsys reports, an nsys report with an ncu CSV), so the cross-rank
step runs too. Each case's exit status is compared as well. ``check`` prints the cases that differ and exits 1
when any does. For changes meant to alter the findings, use ``scripts/findings_diff.py`` instead.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path("../shared/corpus")  # relative, as `goodput analyze` prints the paths it was given
RING = ["nsys/ZhiyiHu1999__DistributedSysLab_FS24__nccl-ring-2node-r0-ault43.sqlite",
        "nsys/ZhiyiHu1999__DistributedSysLab_FS24__nccl-ring-2node-r1-ault44.sqlite"]
RUNS = {
    "ring-2rank": RING,
    "torchrun-plus-ring-r0": ["nsys/GindaChen__nsys-ai__torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", RING[0]],
    "nsys-plus-ncu": ["nsys/0x822a5b87__test-cuda__vecadd-2026.sqlite", "ncu/brycelelbach__nsightful__numba-copy-blocked-full.csv"],
}


def cases() -> dict[str, list[Path]]:
    out = {p.name: [p] for pattern in ("nsys/*.sqlite", "ncu/*.csv", "nccl/*.log")
           for p in sorted((ROOT / CORPUS).glob(pattern))}
    out = {name: [CORPUS / p[0].relative_to(ROOT / CORPUS)] for name, p in out.items()}
    out.update({name: [CORPUS / f for f in files] for name, files in RUNS.items()})
    return out


def run_case(files: list[Path]) -> bytes:
    cmd = [sys.executable, "-c", "import sys; from goodput_cli.main import main; sys.exit(main(sys.argv[1:]))",
           "analyze", "--quiet", "--format", "json", *map(str, files)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          check=False)
    return done.stdout + f"\n-- exit status {done.returncode}\n".encode()


def take(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    todo = cases()
    with ThreadPoolExecutor(max_workers=2) as pool:
        for name, data in zip(todo, pool.map(run_case, todo.values()), strict=True):
            (out / f"{name}.json").write_bytes(data)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("take", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    base = Path(argv[1])
    if argv[0] == "take":
        take(base)
        print(f"{len(cases())} cases written to {base}")
        return 0
    with tempfile.TemporaryDirectory(prefix="goodput-identical-") as tmp:
        take(Path(tmp))
        names = sorted({p.name for p in base.glob("*.json")} | {p.name for p in Path(tmp).glob("*.json")})
        changed = [n for n in names if not (base / n).is_file() or not (Path(tmp) / n).is_file()
                   or (base / n).read_bytes() != (Path(tmp) / n).read_bytes()]
    for name in changed:
        print(f"DIFFERS {name}")
    print(f"{len(names) - len(changed)} of {len(names)} cases byte-identical")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
