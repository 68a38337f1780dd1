"""Streaming reader of Nsight Compute CSV exports (long layouts and ``--page raw``), untrusted input.

Yields one record per metric cell and per rule result, and collects one ``Kernel`` per profiled
launch. Cells are data: nothing is evaluated, formula-looking text (``=HYPERLINK(``) and control
characters are kept as they are. Every problem is a ``TraceError('not_ncu_csv')`` with its line
and column.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from analysis import fmt
from analysis.errors import TraceError
from analysis.readers.ncu.names import parse_dims, short_name
from analysis.readers.ncu.units import normalize, parse_number

MAX_PREAMBLE_LINES = 100_000
# Columns that describe the launch, not a metric (both long layouts and the raw page).
IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
            "Stream", "Block Size", "Grid Size", "Device", "CC")
LONG_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name", "Rule Type",
                "Rule Description", "Estimated Speedup Type", "Estimated Speedup")
_HEADER_START = re.compile(r'\s*(?:"ID"|ID)\s*,')


def looks_like_ncu_csv(head: bytes) -> bool:
    """True when the first bytes of a file look like ncu CSV output (header or ncu's own log lines)."""
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    for line in text.splitlines():
        if line.startswith("==PROF==") or line.startswith("==WARNING==") or line.startswith("==ERROR=="):
            return True
        if _HEADER_START.match(line) and "Kernel Name" in line:
            return True
    return False


@dataclass
class Kernel:
    """One profiled launch as far as the export describes it."""

    kernel_id: int
    name: str
    pid: int | None = None
    process_name: str | None = None
    host: str | None = None
    device: int | None = None
    device_name: str | None = None
    cc: str | None = None
    context: int | None = None
    stream: int | None = None
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    grid_size: int | None = None
    block_size: int | None = None
    registers: int | None = None
    smem: dict[str, float] = field(default_factory=dict)
    cc_parts: dict[str, int] = field(default_factory=dict)
    duration_ns: float | None = None

    @property
    def short_name(self) -> str:
        return short_name(self.name)

    @property
    def shared_mem_bytes(self) -> int | None:
        return _whole(float(round(sum(self.smem.values()))), INT64) if self.smem else None


def _fail(line: int, column: int | None, message: str) -> TraceError:
    where = f"line {line}" + (f", column {column}" if column else "")
    return TraceError("not_ncu_csv", f"{where}: {message}", {"line": line, "column": column})


INT32 = 2**31 - 1
INT64 = 2**63 - 1


def _whole(value: float | None, limit: int = INT32) -> int | None:
    """An integer that fits the schema's column (INTEGER unless told), else None: hostile sizes stay out."""
    if value is None or value != int(value) or abs(value) > limit:
        return None
    return int(value)


def _int(text: str, limit: int = INT32) -> int | None:
    return _whole(parse_number(text), limit)


class NcuCsv:
    """One pass over an ncu CSV file opened in binary mode."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self.line = 0
        self.layout = ""
        self.header: list[str] = []
        self.kernels: dict[int, Kernel] = {}
        self.rows = 0

    def _lines(self) -> Iterator[str]:
        for raw in self._fh:
            self.line += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _fail(self.line, exc.start + 1, "bytes that are not UTF-8; ncu writes UTF-8") from None
            if self.line == 1:
                text = text.removeprefix("\ufeff")
            yield text

    def _find_header(self, lines: Iterator[str]) -> list[str]:
        for text in lines:
            if _HEADER_START.match(text) and "Kernel Name" in text:
                try:
                    cells = next(csv.reader([text], strict=True))
                except csv.Error as exc:
                    raise _fail(self.line, None, f"unreadable CSV header: {exc}") from None
                if cells and cells[0].strip() == "ID" and "Kernel Name" in cells:
                    return [c.strip() for c in cells]
            if self.line >= MAX_PREAMBLE_LINES:
                break
        raise _fail(self.line or 1, None, 'no ncu CSV header ("ID","Process ID",...,"Kernel Name",...) found; '
                    "export with `ncu --csv` or `ncu --import FILE.ncu-rep --csv --page raw`")

    def records(self) -> Iterator[tuple[str, tuple]]:
        """Yield ('metric', row) and ('rule', row) tuples in the column order of the schema."""
        lines = self._lines()
        self.header = self._find_header(lines)
        header_line = self.line
        cols = self.header
        index: dict[str, int] = {}
        for i, name in enumerate(cols):
            if name in index and (name in IDENTITY or name in LONG_COLUMNS):
                raise _fail(header_line, i + 1, f"column {name!r} appears twice in the header")
            index.setdefault(name, i)
        if "Metric Name" in index and "Metric Value" in index:
            self.layout = "long" if "Kernel Time" in index or "Estimated Speedup" not in index else "long-2023"
        elif "Metric Name" in index or "Metric Value" in index:
            raise _fail(header_line, None, "a long-layout header needs both 'Metric Name' and 'Metric Value'")
        else:
            self.layout = "raw"
        units: list[str] | None = None
        after_header = True
        reader = csv.reader(lines, strict=True)
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                raise _fail(self.line, None, f"malformed CSV: {exc}") from None
            if not row or all(not c.strip() for c in row):
                continue
            if [c.strip() for c in row] == cols:  # a second export appended to the first one
                after_header = True
                continue
            if len(row) > len(cols):
                if any(c.strip() for c in row[len(cols):]):
                    raise _fail(self.line, len(cols) + 1, f"{fmt.count(len(row))} cells in a row under a {fmt.count(len(cols))}-column header")
                row = row[: len(cols)]
            row = row + [""] * (len(cols) - len(row))
            if self.layout == "raw" and after_header and not row[index["ID"]].strip():
                units = row  # the raw page's units row
                after_header = False
                continue
            after_header = False
            self.rows += 1
            kernel = self._kernel(row, index)
            if self.layout == "raw":
                yield from self._raw_metrics(kernel, row, index, units)
            else:
                yield from self._long_row(kernel, row, index)

    def _kernel(self, row: list[str], index: dict[str, int]) -> Kernel:
        text = row[index["ID"]]
        kid = _int(text)
        if kid is None:
            raise _fail(self.line, index["ID"] + 1, f"ID {text[:40]!r} is not an integer of at most 2^31-1")
        kernel = self.kernels.get(kid)
        if kernel is not None:
            return kernel

        def cell(name: str) -> str | None:
            i = index.get(name)
            return None if i is None or not row[i].strip() else row[i]

        name_at = index.get("Kernel Name")
        kernel = Kernel(kid, row[name_at] if name_at is not None else "")  # the name exactly as exported
        kernel.pid = _int(cell("Process ID") or "")
        kernel.process_name = cell("Process Name")
        kernel.host = cell("Host Name")
        kernel.device = _int(cell("Device") or "")
        kernel.cc = cell("CC")
        kernel.context = _int(cell("Context") or "", INT64)
        kernel.stream = _int(cell("Stream") or "", INT64)
        kernel.block = parse_dims(cell("Block Size") or "")
        kernel.grid = parse_dims(cell("Grid Size") or "")
        if kernel.block:
            kernel.block_size = _whole(float(kernel.block[0] * kernel.block[1] * kernel.block[2]))
        if kernel.grid:
            kernel.grid_size = _whole(float(kernel.grid[0] * kernel.grid[1] * kernel.grid[2]), INT64)
        self.kernels[kid] = kernel
        return kernel

    def _long_row(self, kernel: Kernel, row: list[str], index: dict[str, int]) -> Iterator[tuple[str, tuple]]:
        def cell(name: str) -> str:
            i = index.get(name)
            return "" if i is None else row[i]

        section = cell("Section Name") or None
        metric = cell("Metric Name")
        if metric.strip():
            text, orig_unit = cell("Metric Value"), cell("Metric Unit")
            value, unit = normalize(text, orig_unit)
            apply_launch_metric(kernel, section, metric, value, unit, text)
            yield "metric", (kernel.kernel_id, section, metric, unit, value, text, orig_unit)
        elif cell("Rule Name").strip():
            speedup = parse_number(cell("Estimated Speedup"))
            yield "rule", (kernel.kernel_id, section, cell("Rule Name"), cell("Rule Type") or None,
                           cell("Rule Description"), cell("Estimated Speedup Type") or None, speedup)

    def _raw_metrics(self, kernel: Kernel, row: list[str], index: dict[str, int],
                     units: list[str] | None) -> Iterable[tuple[str, tuple]]:
        identity = {index[n] for n in IDENTITY if n in index}
        for i, metric in enumerate(self.header):
            if i in identity or not metric:
                continue
            text = row[i]
            orig_unit = units[i] if units else ""
            value, unit = normalize(text, orig_unit)
            apply_launch_metric(kernel, None, metric, value, unit, text)
            yield "metric", (kernel.kernel_id, None, metric, unit, value, text, orig_unit)


_SMEM = {"launch__shared_mem_per_block_static": "static", "Static Shared Memory Per Block": "static",
         "launch__shared_mem_per_block_dynamic": "dynamic", "Dynamic Shared Memory Per Block": "dynamic"}
_DIMS = {"launch__block_dim_": "block", "launch__grid_dim_": "grid"}


def apply_launch_metric(kernel: Kernel, section: str | None, metric: str, value: float | None,
                        unit: str, text: str) -> None:
    """Fill the launch facts of ``kernel`` from a metric that carries one (raw or display name)."""
    sec = (section or "").replace(" ", "").lower()
    if metric == "device__attribute_display_name":
        kernel.device_name = text.strip() or kernel.device_name
        return
    if value is None:
        return
    if metric in ("gpu__time_duration.sum", "gpu__time_duration") or (
            metric == "Duration" and sec.startswith(("gpuspeedoflight", "speedoflight")) and unit == "ns"):
        kernel.duration_ns = value if value >= 0 else None  # a negative duration is no duration
    elif metric in ("launch__registers_per_thread", "Registers Per Thread"):
        kernel.registers = _whole(value)
    elif metric in ("launch__block_size",) or (metric == "Block Size" and "launch" in sec):
        kernel.block_size = kernel.block_size or _whole(value)
    elif metric in ("launch__grid_size",) or (metric == "Grid Size" and "launch" in sec):
        kernel.grid_size = kernel.grid_size or _whole(value, INT64)
    elif metric in _SMEM:
        kernel.smem[_SMEM[metric]] = value
    elif metric in ("device__attribute_compute_capability_major", "device__attribute_compute_capability_minor"):
        part = _whole(value)
        if part is None:
            return
        kernel.cc_parts[metric.rsplit("_", 1)[1]] = part
        if "major" in kernel.cc_parts and "minor" in kernel.cc_parts and not kernel.cc:
            kernel.cc = f"{kernel.cc_parts['major']}.{kernel.cc_parts['minor']}"
    else:
        for prefix, what in _DIMS.items():
            if metric.startswith(prefix) and metric[-1:] in "xyz" and len(metric) == len(prefix) + 1:
                dims = list(getattr(kernel, what) or (None, None, None))
                dims["xyz".index(metric[-1])] = _whole(value)
                setattr(kernel, what, tuple(dims))
