"""Progress on stderr: a redrawn bar on a terminal, throttled plain lines otherwise, nothing when quiet.

Plain lines (logs of batch jobs and CI) start only once the work has lasted ``after_s`` seconds: a
short command stays silent, and a bad file still gets its one-line error and nothing else.

One ``Progress`` per command. ``stage(label, done, total)`` is the ``analysis.api.Progress`` callback
(``done``/``total`` in rows when ``unit`` is "rows"); ``step(label)`` starts a stage without counts (the
analysis); ``finish(text)`` ends the line. On a terminal a ticker thread redraws the elapsed time every
half second, so a long single statement still shows the clock moving.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from analysis import fmt

BAR = 24
TICK_S = 0.5
PLAIN_AFTER_S = 2.0   # plain lines only for work that lasts longer than this
PLAIN_EVERY_S = 5.0   # then a line per this many seconds within a long stage,
PLAIN_GAP_S = 1.0     # and one when a stage starts, unless the last line is younger than this (or than
                      # after_s: with --progress-after 0 every stage gets its line)
# An ETA only once this share of the rows has been counted: the counts move at stage ends, and the rate of
# a first small table (1.3k strings before 23M API calls on the 10M-kernel export) promised days.
ETA_MIN_SHARE = 0.05


def _count(n: float) -> str:
    return fmt.si(n, "").rstrip() if n >= 999.5 else fmt.count(n)


def _secs(s: float) -> str:
    return fmt.elapsed(s)


def _clean(text: str) -> str:
    """File names and stage labels may come from the user or a trace: no control characters."""
    return "".join(c if c.isprintable() else "?" for c in text)


class Progress:
    """Stages of one command's long work; see the module docstring."""

    def __init__(self, *, quiet: bool = False, stream: TextIO | None = None, tty: bool | None = None,
                 after_s: float = PLAIN_AFTER_S) -> None:
        self.stream = stream or sys.stderr
        self.after_s = after_s
        self.shown = False
        self.quiet = quiet
        self.tty = self.stream.isatty() if tty is None else tty
        self.t0 = time.monotonic()
        self.prefix = ""
        self.label = ""
        self.unit = "rows"
        self.done = 0
        self.total = 0
        self.count_t0: tuple[float, int] | None = None   # (time, done) when counting began: the ETA's base
        self.last_plain = -1e9
        self.lock = threading.Lock()
        self.ticker: threading.Thread | None = None
        self.stopped = threading.Event()
        self.held: list[str] | None = None  # plain lines kept back (``hold``)

    # -- the callbacks -------------------------------------------------------------------------------

    def hold(self) -> None:
        """Keep plain lines back until ``release``: work that a bad option may still cancel prints nothing in a
        log, so that the option's error stays one line (a terminal's bar is drawn: ``finish`` clears it)."""
        with self.lock:
            if not self.tty:
                self.held = []

    def release(self) -> None:
        """Write the plain lines kept back since ``hold``, and the next ones as they come."""
        with self.lock:
            held, self.held = self.held, None
            if held:
                self.stream.write("".join(held))
                self.stream.flush()

    def file(self, name: str) -> None:
        """Name the file the next stages belong to."""
        self.prefix = _clean(name)

    def stage(self, label: str, done: int, total: int) -> None:
        if self.quiet:
            return
        with self.lock:
            now = time.monotonic()
            changed = _clean(str(label)) != self.label
            self.label, self.done, self.total = _clean(str(label)), int(done), int(total)
            if total > 1 and self.count_t0 is None:
                self.count_t0 = (now, int(done))
            self._show(now, force=changed)
        self._start_ticker()

    def step(self, label: str) -> None:
        """A stage without counts (e.g. the analysis): shows its elapsed time only."""
        self.count_t0 = None
        self.stage(label, 0, 0)

    def reset(self) -> None:
        """The next file starts: counts and ETA start over."""
        with self.lock:
            self.count_t0 = None
            self.done = self.total = 0

    def finish(self, text: str | None = None) -> None:
        """Stop; clear the bar (terminal), or end the plain lines with ``text`` when any were printed."""
        self.stopped.set()
        if self.ticker is not None:
            self.ticker.join()
            self.ticker = None
        if self.quiet:
            return
        with self.lock:
            if self.held is not None:  # never released: the work was cancelled, its lines are not shown
                self.held = None
                self.shown = False
            if self.tty and self.shown:
                self.stream.write("\r\x1b[K")
            elif self.shown and text:
                self.stream.write(f"goodput: {_clean(text)} in {_secs(time.monotonic() - self.t0)}\n")
            self.stream.flush()

    # -- drawing -------------------------------------------------------------------------------------

    def line(self, now: float) -> str:
        """The status text: file, stage, bar and counts when known, elapsed, ETA."""
        parts = [p for p in (self.prefix, self.label) if p]
        elapsed = now - self.t0
        if self.total > 1:
            frac = min(1.0, max(0.0, self.done / self.total))
            if self.tty:
                fill = int(round(frac * BAR))
                parts.append("[" + "#" * fill + "-" * (BAR - fill) + "]")
            parts.append(f"{fmt.share(frac * 100)} {_count(min(self.done, self.total))}/{_count(self.total)} {self.unit}")
            parts.append(f"elapsed {_secs(elapsed)}")
            if (self.count_t0 is not None and self.done - self.count_t0[1] >= ETA_MIN_SHARE * self.total
                    and frac < 1.0):
                t, d = self.count_t0
                rate = (self.done - d) / max(1e-6, now - t)
                parts.append(f"ETA {_secs((self.total - self.done) / rate)}")
        else:
            parts.append(f"elapsed {_secs(elapsed)}")
        return "goodput: " + "  ".join(parts)

    def _show(self, now: float, *, force: bool) -> None:
        if self.tty:
            self.shown = True
            self.stream.write("\r" + self.line(now)[:200] + "\x1b[K")
            self.stream.flush()
        elif now - self.t0 >= self.after_s and now - self.last_plain >= (
                min(PLAIN_GAP_S, self.after_s) if force else PLAIN_EVERY_S):
            self.shown = True
            self.last_plain = now
            if self.held is not None:
                self.held.append(self.line(now) + "\n")
                return
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def _start_ticker(self) -> None:
        # Redraws while a stage runs: the bar's clock on a terminal, the periodic plain line otherwise.
        if self.ticker is not None or self.stopped.is_set():
            return
        period = TICK_S if self.tty else min(PLAIN_EVERY_S, max(0.05, self.after_s))

        def tick() -> None:
            while not self.stopped.wait(period):
                with self.lock:
                    self._show(time.monotonic(), force=False)

        self.ticker = threading.Thread(target=tick, name="goodput-progress", daemon=True)
        self.ticker.start()
