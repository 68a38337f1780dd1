"""`goodput analyze --window loop:N` prints loop N's steps and step times, not the main loop's (issue #42)."""

from __future__ import annotations

from goodput_cli.render import text
from tests.analysis.test_phases import MS, _analyzed


def test_the_text_under_loop_n_gives_that_loops_steps(tmp_path) -> None:
    a, b = 5 * MS, 8 * MS           # loop 0: 15 steps of 5 ms; loop 1 (the main one): 20 steps of 8 ms
    _, result = _analyzed(tmp_path, [a] * 15 + [b] * 20, window="loop:0")
    out = text(result)
    assert "   loop 0 steps: 15, median 5.00 ms per step" in out
    assert "median 5.00 ms, p90 5.00 ms, p99 5.00 ms, max 5.00 ms (15 iterations of loop 0)" in out
    assert "steady steps" not in out
