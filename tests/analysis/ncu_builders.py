"""Build ncu CSV exports at test time from the layouts of real corpus files (header and identity cells kept)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import corpus_file

NEW_LAYOUT = "numba-copy-blocked-full.csv"      # 2023+ header: Block Size, Grid Size, Device, CC, Estimated Speedup
OLD_LAYOUT = "conv2d-result-rules.csv"          # 2022 header with Kernel Time, program output before it


@dataclass
class CorpusCsv:
    """A corpus CSV parsed with the csv module alone: preamble lines, header, rows (as dicts)."""

    preamble: list[str]
    header: list[str]
    rows: list[dict[str, str]]


def read_corpus_csv(path: Path) -> CorpusCsv:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    records = list(csv.reader(io.StringIO("".join(lines[start:]))))
    header = records[0]
    rows = [dict(zip(header, r + [""] * (len(header) - len(r)), strict=True)) for r in records[1:] if r]
    return CorpusCsv(lines[:start], header, rows)


def _write(header: list[str], rows: list[list[str]], preamble: list[str] = (), newline: str = "\n") -> bytes:
    buf = io.StringIO()
    buf.writelines(preamble)
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator=newline)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def long_csv(metrics: list[tuple[str, str, str, str]], *, layout: str = NEW_LAYOUT, kernels: list[dict] | None = None,
             rules: list[tuple[str, str, str, str, str, str]] = (), keep_preamble: bool = True,
             newline: str = "\n") -> bytes:
    """A long-layout CSV: the real file's header and identity cells, with our (section, name, unit, value) rows.

    ``kernels``: one dict per profiled launch overriding identity cells (e.g. {"ID": "1", "Kernel Name": ...});
    every launch gets every metric row. ``rules``: (section, rule, type, description, speedup type, speedup).
    """
    real = read_corpus_csv(corpus_file(layout))
    base = real.rows[0]
    out: list[list[str]] = []
    for over in kernels or [{}]:
        ident = {**base, **over}
        for section, name, unit, value in metrics:
            row = {**ident, "Section Name": section, "Metric Name": name, "Metric Unit": unit, "Metric Value": value}
            for col in ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup"):
                if col in row:
                    row[col] = ""
            out.append([row[c] for c in real.header])
        for section, rule, typ, desc, stype, speedup in rules:
            row = {**ident, "Section Name": section, "Metric Name": "", "Metric Unit": "", "Metric Value": "",
                   "Rule Name": rule, "Rule Type": typ, "Rule Description": desc,
                   "Estimated Speedup Type": stype, "Estimated Speedup": speedup}
            out.append([row.get(c, "") for c in real.header])
    return _write(real.header, out, real.preamble if keep_preamble else [], newline)


def raw_csv(kernels: list[dict[str, str]], units: dict[str, str], *, layout: str = NEW_LAYOUT) -> bytes:
    """A ``--page raw`` CSV: identity columns of the real layout, one column per metric, a units row."""
    real = read_corpus_csv(corpus_file(layout))
    ident = [c for c in real.header if c not in ("Section Name", "Metric Name", "Metric Unit", "Metric Value",
                                                 "Rule Name", "Rule Type", "Rule Description",
                                                 "Estimated Speedup Type", "Estimated Speedup")]
    metric_cols = list(units)
    header = ident + metric_cols
    rows = [[""] * len(ident) + [units[m] for m in metric_cols]]
    for over in kernels:
        cells = {**real.rows[0], **over}
        rows.append([cells.get(c, "") for c in header])
    return _write(header, rows)


def write(tmp_path: Path, data: bytes, name: str = "report.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path
