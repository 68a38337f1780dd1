"""One NCCL log line as text: launcher prefixes peeled off, the ``host:pid:tid [dev]`` origin split from the message.

Everything here is plain ``str`` methods on one line at a time (no regular expressions), so the cost of a
line is linear in its length whatever it holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, BinaryIO

MAX_LINE_BYTES = 64 * 1024  # longer lines are cut here (and counted)
_STD_TAGS = ("<stdout>:", "<stderr>:")
_ASCII_DIGITS = frozenset("0123456789")


class Origin:
    """Where a line came from, as far as its prefixes say: the launcher's task label and NCCL's own prefix
    (``host:pid:tid [dev]``), parsed from ``head`` only when a handler asks (most lines never need it)."""

    __slots__ = ("_parsed", "_dev", "_host", "_pid", "_tid", "head", "label")

    def __init__(self, label: int | None = None, head: str = "") -> None:
        self.label = label      # srun ``N:`` or mpirun ``[1,N]`` task number (usually the rank)
        self.head = head
        self._parsed = not head
        self._host: str | None = None
        self._pid: int | None = None
        self._tid: int | None = None
        self._dev: int | None = None   # NCCL's ``[d]``: the CUDA device of the thread that printed

    def _parse(self) -> None:
        self._parsed = True
        self._host, self._pid, self._tid, self._dev = parse_origin(self.head)

    @property
    def host(self) -> str | None:
        if not self._parsed:
            self._parse()
        return self._host

    @property
    def pid(self) -> int | None:
        if not self._parsed:
            self._parse()
        return self._pid

    @property
    def tid(self) -> int | None:
        if not self._parsed:
            self._parse()
        return self._tid

    @property
    def dev(self) -> int | None:
        if not self._parsed:
            self._parse()
        return self._dev


CHUNK_BYTES = 4 * 1024 * 1024


def read_blocks(fh: BinaryIO, counters: dict[str, int], digest: Any = None) -> Iterator[list[str]]:
    """The file's lines as text (UTF-8, bad bytes replaced), a few MiB at a time, each line cut at
    ``MAX_LINE_BYTES`` (``counters['truncated']`` counts them). Memory stays within one chunk plus one
    line's cap however long a line is: the rest of an overlong line is skipped as it streams by.
    ``digest``: a ``hashlib`` object fed every byte read (the file's content digest)."""
    carry = b""
    skipping = False   # inside an overlong line whose first MAX_LINE_BYTES were kept already
    while True:
        chunk = fh.read(CHUNK_BYTES)
        if not chunk:
            break
        if digest is not None:
            digest.update(chunk)
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk = chunk[nl + 1:]
            skipping = False
        data = carry + chunk if carry else chunk
        nl = data.rfind(b"\n")
        if nl < 0:
            if len(data) > MAX_LINE_BYTES:
                counters["truncated"] = counters.get("truncated", 0) + 1
                yield [data[:MAX_LINE_BYTES].decode("utf-8", "replace").rstrip("\r")]
                carry = b""
                skipping = True
            else:
                carry = data
            continue
        carry = data[nl + 1:]
        if len(carry) > MAX_LINE_BYTES:
            counters["truncated"] = counters.get("truncated", 0) + 1
            tail = carry[:MAX_LINE_BYTES]
            carry = b""
            skipping = True
            yield [*_split(data[:nl], counters), tail.decode("utf-8", "replace").rstrip("\r")]
            continue
        yield _split(data[:nl], counters)
    if carry and not skipping:
        yield _split(carry, counters)


def _split(block: bytes, counters: dict[str, int]) -> list[str]:
    lines = block.decode("utf-8", "replace").split("\n")
    if len(block) > MAX_LINE_BYTES:
        for i, line in enumerate(lines):
            if len(line) > MAX_LINE_BYTES:
                counters["truncated"] = counters.get("truncated", 0) + 1
                lines[i] = line[:MAX_LINE_BYTES]
    return lines


def strip_mpirun(line: str) -> str:
    """``line`` without mpirun's ``[1,N]<stdout>:`` tags, wherever they stand (a row of nccl-tests can carry
    several where another rank's output cut into it)."""
    if "]<std" not in line:
        return line
    out: list[str] = []
    start = 0
    while True:
        at = line.find("]<std", start)
        if at < 0:
            break
        open_at = line.rfind("[", max(start, at - 24), at)
        tag_end = at + 1 + 9
        if open_at < 0 or line[at + 1:tag_end] not in _STD_TAGS:
            out.append(line[start:at + 5])
            start = at + 5
            continue
        out.append(line[start:open_at])
        start = tag_end
    out.append(line[start:])
    return "".join(out)


def peel_label(line: str) -> tuple[int | None, str]:
    """An srun ``N:`` / mpirun ``[1,N]`` / ``[TAG]:`` prefix split off: (task number or None, the rest)."""
    s = line.lstrip(" ")
    if s[:1] in _ASCII_DIGITS:
        colon = s.find(":", 0, 8)
        if colon > 0 and s[colon + 1:colon + 2] in (" ", "") and (label := int_or_none(s[:colon])) is not None:
            return label, s[colon + 2:]
        return None, line
    if s.startswith("["):
        close = s.find("]", 1, 40)
        if close > 0:
            inner = s[1:close]
            rest = s[close + 1:]
            if rest.startswith(_STD_TAGS):
                rest = rest[9:]
                head, _, tail = inner.partition(",")
                return int_or_none(tail), rest
            if rest.startswith(":") and inner.isalpha() and inner.isupper():
                return None, rest[1:]
    return None, line


def parse_origin(head: str) -> tuple[str | None, int | None, int | None, int | None]:
    """(host, pid, tid, dev) from the text before ``NCCL INFO``/``NCCL WARN``: ``host:pid:tid [dev] [file.cc:NN]``."""
    parts = head.split()
    host = pid = tid = dev = None
    for i, part in enumerate(parts):
        if part.startswith("[") and part.endswith("]") and part[1:-1].isdigit():
            dev = int_or_none(part[1:-1])
            if i > 0:
                host, pid, tid = _host_pid_tid(parts[i - 1])
            return host, pid, tid, dev
    if parts:
        host, pid, tid = _host_pid_tid(parts[0])
    return host, pid, tid, dev


def _host_pid_tid(token: str) -> tuple[str | None, int | None, int | None]:
    rest, _, tid = token.rpartition(":")
    host, _, pid = rest.rpartition(":")
    if host and pid.isdigit() and tid.isdigit():
        return host, int_or_none(pid), int_or_none(tid)
    return None, None, None


def int_or_none(text: str) -> int | None:
    """A plain decimal integer (optional minus sign, at most 18 digits: no huge-number conversion), else None."""
    if text.isdecimal() and len(text) <= 18:
        return int(text)
    t = text.strip()
    if t.startswith("-"):
        return -int(t[1:]) if t[1:].isdecimal() and len(t) <= 19 else None
    return int(t) if t.isdecimal() and len(t) <= 18 else None


def float_or_none(text: str) -> float | None:
    """A finite float, else None (text longer than 64 characters is no number here)."""
    if len(text) > 64:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def rank_and_tag(text: str) -> tuple[int | None, str | None]:
    """``3[81000]`` -> (3, '81000'); ``9`` -> (9, None)."""
    t = text.strip()
    bracket = t.find("[")
    if bracket < 0:
        return int_or_none(t), None
    close = t.find("]", bracket)
    return int_or_none(t[:bracket]), (t[bracket + 1:close] if close > bracket else None)


def normalize_version(text: str) -> str | None:
    """NCCL's version as ``major.minor.patch`` from ``2.9.8+cuda11.3`` or PyTorch's ``20.9.8`` (code 20908)."""
    core = text.strip().split("+", 1)[0].split()[0] if text.strip() else ""
    parts = core.split(".")
    if len(parts) < 3 or not all(p.isdecimal() and len(p) <= 9 for p in parts[:3]):
        return None
    major, minor, patch = (int(p) for p in parts[:3])
    if 10 <= major < 100 and minor < 10 and patch < 100:
        # PyTorch formats NCCL_VERSION_CODE (2.9.8 = 20908, 2.10.3 = 21003) as code/1000, code%1000/100,
        # code%100: "20.9.8", "21.0.3". Rebuild the code and read it the way NCCL defines it.
        code = major * 1000 + minor * 100 + patch
        major, minor, patch = code // 10000, (code % 10000) // 100, code % 100
    return f"{major}.{minor}.{patch}"
