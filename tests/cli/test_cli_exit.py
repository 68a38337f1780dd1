"""`goodput analyze` run as a program ends its process without the interpreter's shutdown (issue #43): what it
printed is all there, its exit status is the command's, and nothing it made is left behind. Called in-process
(``main(argv)``), it returns like any function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from goodput_cli.main import main
from tests.conftest import corpus_file

ROOT = Path(__file__).resolve().parents[2]
EXPORT = str(corpus_file("vecadd-2026.sqlite"))
PROGRAM = "import sys; from goodput_cli.main import main; sys.exit(main())"


def _program(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, "-c", PROGRAM, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_the_program_prints_all_of_its_json_and_leaves_nothing(tmp_path: Path, capsys) -> None:
    assert main(["analyze", "--format", "json", "--quiet", EXPORT]) == 0  # in-process: it returns
    expected = capsys.readouterr().out
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = _program(["analyze", "--format", "json", "--quiet", EXPORT], scratch)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
    assert json.loads(done.stdout)["findings"]
    assert list(scratch.iterdir()) == []  # the command's temporary folder is gone


def test_bad_input_still_exits_2_with_one_line(tmp_path: Path) -> None:
    done = _program(["analyze", "--top", "-1", EXPORT], tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("goodput: --top -1")
    assert list(tmp_path.iterdir()) == []
