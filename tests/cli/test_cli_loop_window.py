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


def test_the_iterations_line_under_loop_n_describes_that_loop(tmp_path) -> None:
    """The "iterations:" line is loop N's (its count and step times), the main loop named beside; with the
    main loop as the window it stays the main loop's."""
    a, b = 5 * MS, 8 * MS           # loop 0: 15 steps of 5 ms; loop 1 (the main one): 20 steps of 8 ms
    (tmp_path / "n0").mkdir()
    (tmp_path / "n1").mkdir()
    _, result = _analyzed(tmp_path / "n0", [a] * 15 + [b] * 20, window="loop:0")
    line = next(x for x in text(result).splitlines() if x.startswith("   iterations:"))
    assert line.startswith("   iterations: loop 0 of 2, 15 from the repeating GPU work (")
    assert line.endswith("median 5.00 ms per step (p10 5.00 ms, p90 5.00 ms, p99 5.00 ms); the main loop is loop 1 "
                         "(20 iterations)")
    _, result = _analyzed(tmp_path / "n1", [a] * 15 + [b] * 20, window="loop:1")
    line = next(x for x in text(result).splitlines() if x.startswith("   iterations:"))
    assert line.startswith("   iterations: 20 from the repeating GPU work (") and "median 8.00 ms per step" in line
