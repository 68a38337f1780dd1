"""Progress on stderr: a redrawn bar on a terminal (a real pseudo-terminal), plain lines in logs once the
work lasts, nothing with --quiet; stdout carries the result alone in every case."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
import time

from tests.cli.variants import goodput
from tests.conftest import ROOT, corpus_file

SRC = corpus_file("cloverleaf-devsync.sqlite")
CMD = [sys.executable, "-c", "import sys; from goodput_cli.main import main; sys.exit(main())"]


def on_a_terminal(*args: str, timeout: float = 300) -> tuple[int, bytes, bytes]:
    """Run the CLI with stderr on a pseudo-terminal and stdout on a pipe: (status, terminal bytes, stdout)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CMD, *args], stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, cwd=ROOT)
    os.close(slave)
    # stdout is drained beside the terminal: a result larger than the pipe's buffer would block the child.
    drained: list[bytes] = []
    reader = threading.Thread(target=lambda: drained.append(proc.stdout.read()), daemon=True)
    reader.start()
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    reader.join(timeout=30)
    out = drained[0] if drained else b""
    status = proc.wait(timeout=30)
    os.close(master)
    return status, seen, out


def test_terminal_shows_a_bar_with_stages_rows_elapsed_and_eta():
    status, tty, out = on_a_terminal("analyze", str(SRC), "--format", "json")
    assert status == 0
    assert out.startswith(b"{")  # the result alone on stdout
    text = tty.decode()
    assert "\r" in text and "\x1b[K" in text  # redrawn in place, then cleared
    assert re.search(r"kernels +\[#*-*\] +[\d.]+ % [\d.,]+(?: k)?/[\d.]+ k rows +elapsed [\d.]+ m?s", text), text
    assert "ETA " in text and "validate" in text and "analyzing 1 report" in text
    # Nothing is left on the terminal: the last thing written clears the bar.
    assert text.endswith("\r\x1b[K")


def test_quiet_terminal_gets_nothing():
    status, tty, out = on_a_terminal("analyze", str(SRC), "--quiet")
    assert status == 0 and tty == b"" and b"top kernels by total time" in out


def test_plain_lines_when_stderr_is_not_a_terminal():
    proc = goodput("ingest", str(SRC), "--out", "/dev/null/never", "--progress-after", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1  # a bad --out: one line, no progress
    assert proc.stderr.startswith("goodput: /dev/null/never: not_writable: ")
    proc = goodput("analyze", str(SRC), "--progress-after", "0")
    assert proc.returncode == 0
    lines = proc.stderr.splitlines()
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    assert all(line.startswith("goodput: ") for line in lines)
    # --progress-after 0: a line per stage, each table's with the source rows copied so far.
    kernels = [line for line in lines if "  kernels " in line]
    assert len(kernels) == 1 and re.search(r"[\d.]+ % [\d.]+ k/[\d.]+ k rows +elapsed [\d.]+ m?s", kernels[0]), lines
    assert lines[-1].startswith("goodput: analyzed 1 report in ")
    assert "top kernels by total time" in proc.stdout


def test_short_work_stays_silent_in_logs_and_quiet_means_nothing():
    # Below the --progress-after threshold a log gets no progress at all; --quiet never does.
    for args in (("--progress-after", "600"), ("--quiet", "--progress-after", "0")):
        proc = goodput("analyze", str(SRC), *args)
        assert proc.returncode == 0 and proc.stderr == "", (args, proc.stderr)


def test_eta_waits_for_a_share_of_the_rows():
    # The 10M-kernel export's stages: 1.3k strings, then 23M API calls in one long statement. An ETA
    # extrapolated from the strings alone promised thousands of minutes; none is shown until 5% is counted.
    import io

    from goodput_cli.progress import Progress

    p = Progress(stream=io.StringIO(), tty=False, after_s=0)
    p.stage("strings", 0, 45_400_000)
    p.stage("cuda_api names", 1_300, 45_400_000)
    t0 = p.count_t0[0]
    assert "ETA" not in p.line(t0 + 50)
    p.stage("kernels", 23_200_000, 45_400_000)
    assert re.search(r"51 % 23\.2 M/45\.4 M rows +elapsed 1 min 00 s +ETA \d", p.line(t0 + 60)), p.line(t0 + 60)
    p.finish()
