"""The ingest child's stdout is handed on line by line as it arrives (``spawn._lines``): lines that come in one
read are all seen at once, not left in a buffer until the next line or the end of the child."""

from __future__ import annotations

import os
import selectors
import time

import pytest

from analysis.errors import TraceError
from analysis.readers.nsys.spawn import _lines


def _pipe_lines(deadline_s: float = 5.0):
    read_fd, write_fd = os.pipe()
    sel = selectors.DefaultSelector()
    sel.register(read_fd, selectors.EVENT_READ)
    return read_fd, write_fd, _lines(sel, read_fd, time.monotonic() + deadline_s)


def test_lines_written_together_are_all_handed_on_before_the_next_write() -> None:
    read_fd, write_fd, lines = _pipe_lines()
    try:
        os.write(write_fd, b'{"step": 1}\n{"step": 2}\n{"step": 3}\n')
        # The pipe stays open and nothing more is written: each line must come from the one read.
        assert [next(lines) for _ in range(3)] == ['{"step": 1}\n', '{"step": 2}\n', '{"step": 3}\n']
    finally:
        os.close(write_fd)
        os.close(read_fd)


def test_a_line_split_across_writes_is_joined_and_the_end_flushes_a_last_partial_line() -> None:
    read_fd, write_fd, lines = _pipe_lines()
    try:
        os.write(write_fd, b'{"st')
        os.write(write_fd, 'ep": 1, "stage": "kérnels"}\n{"ok": true}'.encode())
        assert next(lines) == '{"step": 1, "stage": "kérnels"}\n'
        os.close(write_fd)
        assert list(lines) == ['{"ok": true}']
    finally:
        os.close(read_fd)


def test_no_line_before_the_deadline_is_a_timeout() -> None:
    read_fd, write_fd, lines = _pipe_lines(deadline_s=0.2)
    try:
        with pytest.raises(TraceError, match="longer than the configured limit"):
            next(lines)
    finally:
        os.close(write_fd)
        os.close(read_fd)
