"""nccl-tests' own output in a log: the ``# Using devices`` list and the result table, whose rows other
threads' log lines may cut in two or three pieces (the pieces are joined back in order)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from analysis.network_path import TestsRow
from analysis.readers.nccl.lines import float_or_none, int_or_none

MAX_ROWS = 100_000
_NUMERIC = set("0123456789.-+")


def _is_number(token: str) -> bool:
    return float_or_none(token) is not None


def _table_token(token: str) -> bool:
    return token == "N/A" or _is_number(token) or (token.isalnum() and len(token) <= 12)


def numeric_prefix(token: str, hosts: set[str]) -> tuple[str, str]:
    """``0mew0`` -> (``0``, ``mew0``): a table cell with a host name glued to it, split at a known host when
    one matches, else after the longest run of number characters."""
    # A cell is short ("-1", "0", "N/A", "1e+00") and a host name at most 255 characters: a few set lookups.
    for i in range(1, min(len(token), 33)):
        if len(token) - i <= 255 and token[i:] in hosts:
            return token[:i], token[i:]
    if token.startswith("N/A"):
        return "N/A", token[3:]
    i = 0
    while i < len(token) and token[i] in _NUMERIC:
        i += 1
    return token[:i], token[i:]


class DeviceRow(TypedDict):
    """A ``# Rank 0 Group 0 Pid 25 on host device 0 [0x53] NVIDIA H100`` line: the parts it has."""

    rank: int | None
    line: int
    pid: NotRequired[int | None]
    host: NotRequired[str | None]
    device: NotRequired[int | None]
    bus: NotRequired[str]
    gpu: NotRequired[str | None]


def _cells(toks: list[str], at: int) -> tuple[float | None, float | None, float | None, float | None]:
    """Time, algbw, busbw and wrong count from the four cells at ``at`` (all None where the row is short)."""
    cells = toks[at:at + 4]
    if len(cells) < 4:
        return None, None, None, None
    return (float_or_none(cells[0]) if cells[0] else None, float_or_none(cells[1]) if cells[1] else None,
            float_or_none(cells[2]) if cells[2] else None,
            float_or_none(cells[3]) if cells[3] and cells[3] != "N/A" else None)


@dataclass
class TestsTable:
    """A state machine over the lines nccl-tests prints (``#`` lines and bare result rows)."""

    active: bool = False
    name: str | None = None
    version: str | None = None
    lead: int = 5                      # columns before the first ``time``: size count type redop root (2.5: 3)
    layout: str | None = None
    avg_busbw: float | None = None
    avg_line: int | None = None
    out_of_bounds: str | None = None
    devices: list[DeviceRow] = field(default_factory=list)
    rows: list[TestsRow] = field(default_factory=list)  # the result table's rows, as the log's records hold them
    table: int = -1
    dropped: int = 0
    _pending: list[str] = field(default_factory=list)
    _pending_line: int = 0

    # -------------------------------------------------------------- feeding
    def feed(self, s: str, lineno: int) -> bool:
        """Consume ``s`` (stripped, no NCCL prefix) when it belongs to nccl-tests' output."""
        if s.startswith("#"):
            self._comment(s[1:].strip(), lineno)
            return True
        if not self.active:
            return False
        tokens = s.split()
        if not tokens or not all(_table_token(t) for t in tokens):
            return False
        self._fragment(tokens, lineno)
        return True

    def glued(self, head: str, lineno: int, hosts: set[str] | None = None) -> str:
        """The text before a log line's ``host:pid:tid [dev]`` when a table piece sits in front of it: the piece
        is consumed, and the clean origin text is returned."""
        parts = head.split()
        dev_at = next((i for i, p in enumerate(parts) if p.startswith("[") and p.endswith("]")
                       and p[1:-1].isdigit()), None)
        if dev_at is None or dev_at < 1:
            return head
        origin = parts[dev_at - 1]
        host_part, _, tail = origin.partition(":")
        known = set(hosts or ()) | {h for d in self.devices[:256] if (h := d.get("host"))}
        cell, host = numeric_prefix(host_part, known)
        pieces = parts[:dev_at - 1] + ([cell] if cell else [])
        if pieces and self.active and all(_table_token(t) for t in pieces):
            self._fragment(pieces, lineno)
        return " ".join([f"{host}:{tail}", *parts[dev_at:]])

    # -------------------------------------------------------------- pieces
    def _comment(self, text: str, lineno: int) -> None:
        if text.startswith("Avg bus bandwidth"):
            self.avg_busbw = float_or_none(text.partition(":")[2].strip())
            self.avg_line = lineno
            self._flush()
            self.active = False
            return
        if text.startswith("Out of bounds values"):
            self.out_of_bounds = text.partition(":")[2].strip()[:64]
            self._flush()
            return
        if text.startswith("Collective test starting:"):
            self.name = text.partition(":")[2].strip()[:64]
            return
        if text.startswith("nccl-tests version"):
            self.version = text.split()[2][:32] if len(text.split()) > 2 else None
            return
        if text.startswith("Rank ") and " on " in text and " device " in text:
            self._device(text, lineno)
            return
        words = text.split()
        if "size" in words and "count" in words and ("busbw" in words or "algbw" in words):
            first_time = words.index("time") if "time" in words else 5
            self.lead = first_time
            self.layout = "redop_root" if "redop" in words else "classic"
            self.active = True
            self.table += 1
            self._pending = []

    def _device(self, text: str, lineno: int) -> None:
        # "Rank  0 Group  0 Pid     25 on test-nccl-worker-0 device  0 [0x53] NVIDIA H100 80GB HBM3"
        words = text.split()
        row: DeviceRow = {"rank": int_or_none(words[1]) if len(words) > 1 else None, "line": lineno}
        if "Pid" in words:
            row["pid"] = int_or_none(words[words.index("Pid") + 1]) if words.index("Pid") + 1 < len(words) else None
        on = words.index("on")
        row["host"] = words[on + 1][:256] if on + 1 < len(words) else None
        if "device" in words:
            d = words.index("device")
            row["device"] = int_or_none(words[d + 1]) if d + 1 < len(words) else None
            rest = words[d + 2:]
            if rest and rest[0].startswith("["):
                row["bus"] = rest[0].strip("[]")[:32]
                rest = rest[1:]
            row["gpu"] = " ".join(rest)[:128] or None
        if len(self.devices) < 100_000:
            self.devices.append(row)

    def _fragment(self, tokens: list[str], lineno: int) -> None:
        starts_row = (len(tokens) > self.lead - 1 and tokens[0].isdigit() and len(tokens) >= 3
                      and tokens[2].isalpha())
        if starts_row:
            self._flush()
            self._pending_line = lineno
        elif not self._pending:
            return  # a piece without the row it belongs to
        self._pending.extend(tokens)
        if len(self._pending) >= self.lead + 8:
            self._flush()

    def _flush(self) -> None:
        toks = self._pending
        self._pending = []
        if len(toks) < self.lead + 4:
            return
        if len(self.rows) >= MAX_ROWS:
            self.dropped += 1
            return
        lead = self.lead
        oop, ip = _cells(toks, lead), _cells(toks, lead + 4)
        self.rows.append(TestsRow(table=self.table, line=self._pending_line, size=int_or_none(toks[0]),
                                  count=int_or_none(toks[1]), type=toks[2][:16],
                                  redop=toks[3][:16] if lead >= 5 else None,
                                  root=int_or_none(toks[4]) if lead >= 5 else None,
                                  oop_time_us=oop[0], oop_algbw=oop[1], oop_busbw=oop[2], oop_wrong=oop[3],
                                  ip_time_us=ip[0], ip_algbw=ip[1], ip_busbw=ip[2], ip_wrong=ip[3]))

    def finish(self) -> None:
        self._flush()
