"""One NCCL log line as text: launcher prefixes peeled off, the ``host:pid:tid [dev]`` origin split from the message.

Everything here is plain ``str`` methods on one line at a time (no regular expressions), so the cost of a
line is linear in its length whatever it holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAX_LINE_BYTES = 64 * 1024  # longer lines are cut here (and counted)
_STD_TAGS = ("<stdout>:", "<stderr>:")


@dataclass
class Origin:
    """Where a line came from, as far as its prefixes say: the launcher's task label and NCCL's own prefix."""

    label: int | None = None       # srun ``N:`` or mpirun ``[1,N]`` task number (usually the rank)
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None         # NCCL's ``[d]``: the CUDA device of the thread that printed


def read_lines(fh: BinaryIO, counters: dict[str, int]) -> Iterator[str]:
    """The file's lines as text (UTF-8, bad bytes replaced), each cut at ``MAX_LINE_BYTES``.

    ``counters['truncated']`` counts the cut lines; the rest of a cut line is read and dropped in
    bounded pieces, so a 10 MB line never sits in memory whole."""
    readline = fh.readline
    while True:
        raw = readline(MAX_LINE_BYTES)
        if not raw:
            return
        if len(raw) >= MAX_LINE_BYTES and not raw.endswith(b"\n"):
            counters["truncated"] = counters.get("truncated", 0) + 1
            while True:  # drop the rest of this line
                rest = readline(MAX_LINE_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
        yield raw.decode("utf-8", "replace").rstrip("\r\n")


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
    if s[:1].isdigit():
        colon = s.find(":", 0, 8)
        if colon > 0 and s[:colon].isdigit() and s[colon + 1:colon + 2] in (" ", ""):
            return int(s[:colon]), s[colon + 2:]
        return None, line
    if s.startswith("["):
        close = s.find("]", 1, 40)
        if close > 0:
            inner = s[1:close]
            rest = s[close + 1:]
            if rest.startswith(_STD_TAGS):
                rest = rest[9:]
                head, _, tail = inner.partition(",")
                return (int(tail) if tail.isdigit() else None), rest
            if rest.startswith(":") and inner.isalpha() and inner.isupper():
                return None, rest[1:]
    return None, line


def parse_origin(head: str, origin: Origin) -> None:
    """Fill ``origin`` from the text before ``NCCL INFO``/``NCCL WARN``: ``host:pid:tid [dev] [file.cc:NN]``."""
    parts = head.split()
    for i, part in enumerate(parts):
        if part.startswith("[") and part.endswith("]") and part[1:-1].isdigit():
            origin.dev = int(part[1:-1])
            if i > 0:
                host, _, rest = parts[i - 1].rpartition(":")
                host2, _, pid = host.rpartition(":")
                if host2 and pid.isdigit() and rest.isdigit():
                    origin.host, origin.pid, origin.tid = host2, int(pid), int(rest)
            return
    if parts:
        host, _, rest = parts[0].rpartition(":")
        host2, _, pid = host.rpartition(":")
        if host2 and pid.isdigit() and rest.isdigit():
            origin.host, origin.pid, origin.tid = host2, int(pid), int(rest)


def int_or_none(text: str) -> int | None:
    t = text.strip()
    if t.startswith("-") and t[1:].isdigit():
        return int(t)
    return int(t) if t.isdigit() else None


def float_or_none(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


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
    if len(parts) < 3 or not all(p.isdigit() for p in parts[:3]):
        return None
    major, minor, patch = (int(p) for p in parts[:3])
    if 10 <= major < 100 and minor < 10 and patch < 100:
        # PyTorch formats NCCL_VERSION_CODE (2.9.8 = 20908, 2.10.3 = 21003) as code/1000, code%1000/100,
        # code%100: "20.9.8", "21.0.3". Rebuild the code and read it the way NCCL defines it.
        code = major * 1000 + minor * 100 + patch
        major, minor, patch = code // 10000, (code % 10000) // 100, code % 100
    return f"{major}.{minor}.{patch}"
