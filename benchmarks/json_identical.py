"""Check that `goodput analyze --format json` prints byte-identical output with this checkout and a base tree.

Every corpus input is analyzed: the nsys exports, the ncu CSV files and the NCCL logs
(``../shared/corpus/{nsys,ncu,nccl}``). The base tree's outputs are kept under ``--cache`` (keyed by the base's
path and the input's name), so a second check only runs this checkout. Exits 1 and names the inputs whose
output differs, or whose exit status differs.

    .venv/bin/python benchmarks/json_identical.py --base /path/to/clean/tree
    .venv/bin/python benchmarks/json_identical.py --base main          # a git revision (git archive)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cli import tree_of  # noqa: E402 - a tree from a folder or a git revision

CORPUS = ROOT.parent / "shared" / "corpus"
CLI = "import sys; from goodput_cli.main import main; sys.exit(main())"


def inputs() -> list[Path]:
    """Every corpus input: nsys exports, ncu CSV files, NCCL logs."""
    return (sorted((CORPUS / "nsys").glob("*.sqlite")) + sorted((CORPUS / "ncu").glob("*.csv"))
            + sorted((CORPUS / "nccl").glob("*.log")))


def analyze(code: Path, src: Path) -> bytes:
    """Exit status and stdout of ``goodput analyze --format json --quiet src`` with the code of ``code``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env["PYTHONPATH"] = str(code)
    proc = subprocess.run([sys.executable, "-c", CLI, "analyze", "--format", "json", "--quiet", str(src)],
                          env=env, cwd=code, capture_output=True, timeout=900)
    return f"rc={proc.returncode}\n".encode() + proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="a clean source tree or a git revision")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "goodput-json-identical"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    files = inputs()
    cache = Path(args.cache) / hashlib.sha256(args.base.encode()).hexdigest()[:12]
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="goodput-json-identical-") as tmp:
        base = tree_of(args.base, Path(tmp) / "base")

        def both(src: Path) -> tuple[str, bool]:
            kept = cache / (src.name + ".out")
            if not kept.exists():
                kept.write_bytes(analyze(base, src))
            return src.name, analyze(ROOT, src) == kept.read_bytes()

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(both, files))
    differ = [name for name, same in results if not same]
    counts = {kind: len(list((CORPUS / kind).glob(pat))) for kind, pat in
              (("nsys", "*.sqlite"), ("ncu", "*.csv"), ("nccl", "*.log"))}
    print(f"{len(files)} inputs ({counts['nsys']} nsys, {counts['ncu']} ncu, {counts['nccl']} nccl): "
          + (f"{len(differ)} differ: {', '.join(differ)}" if differ else "every JSON output byte-identical"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
