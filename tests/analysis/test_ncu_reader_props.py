"""Property tests of the ncu CSV reader: hostile bytes parse correctly or fail with a typed TraceError."""

from __future__ import annotations

import csv
import io

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.errors import TraceError
from analysis.readers.ncu.ingest import ingest_ncu
from analysis.readers.ncu.reader import NcuCsv
from analysis.readers.ncu.units import parse_number
from tests.analysis.ncu_builders import NEW_LAYOUT, read_corpus_csv, write
from tests.conftest import corpus_file

HEADER = read_corpus_csv(corpus_file(NEW_LAYOUT)).header
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse(data: bytes):
    reader = NcuCsv(io.BytesIO(data))
    records = list(reader.records())
    return reader, records


def build(cells: list[dict[str, str]], *, bom: bool, newline: str, preamble: str = "") -> bytes:
    """ncu quotes every cell (QUOTE_ALL); unquoted oddities are covered by the arbitrary-bytes test."""
    buf = io.StringIO()
    buf.write(preamble)
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator=newline)
    writer.writerow(HEADER)
    for c in cells:
        writer.writerow([c.get(h, "") for h in HEADER])
    return (b"\xef\xbb\xbf" if bom else b"") + buf.getvalue().encode("utf-8")


# Any text, including quotes, separators, CR/LF inside quoted cells and control characters (not NUL,
# which the csv module rejects as a typed error, tested below).
cell_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)


@SETTINGS
@given(names=st.lists(cell_text, min_size=1, max_size=4), values=st.lists(cell_text, min_size=1, max_size=4),
       bom=st.booleans(), newline=st.sampled_from(["\n", "\r\n"]))
def test_roundtrip_of_any_cell_text(names, values, bom, newline):
    rows = [{"ID": str(i), "Process ID": "7", "Kernel Name": name, "Section Name": "S", "Metric Name": f"m{j}",
             "Metric Unit": "byte", "Metric Value": value}
            for i, name in enumerate(names) for j, value in enumerate(values)]
    reader, records = parse(build(rows, bom=bom, newline=newline, preamble="==PROF== hi\nprogram output\n"))
    assert [k.name for k in reader.kernels.values()] == names
    assert [r[1][5] for r in records] == [row["Metric Value"] for row in rows]
    for (_, rec), row in zip(records, rows, strict=True):
        expected = parse_number(row["Metric Value"])
        assert rec[4] == expected  # value in bytes (factor 1) or None for non-numbers


@SETTINGS
@given(data=st.binary(max_size=400), cut=st.integers(0, 2000))
def test_arbitrary_bytes_parse_or_raise_typed_error(data, cut):
    good = build([{"ID": "0", "Kernel Name": "k", "Metric Name": "m", "Metric Value": "1,024"}], bom=False, newline="\n")
    blob = good[:cut] + data + good[cut:]
    try:
        parse(blob)
    except TraceError as exc:
        assert exc.code == "not_ncu_csv" and exc.details["line"] >= 1


@SETTINGS
@given(n=st.integers(0, 10**15), sep=st.sampled_from([",", " ", "\u00a0", "\u202f", "'"]),
       frac=st.one_of(st.none(), st.integers(0, 99)))
def test_thousands_separators_of_other_locales(n, sep, frac):
    digits = f"{n:,}".replace(",", sep)
    decimal = "." if sep != "," else "."
    text = digits if frac is None else f"{digits}{decimal}{frac:02d}"
    expected = n + (0 if frac is None else frac / 100)
    assert parse_number(text) == pytest.approx(expected, rel=1e-15)


@given(n=st.integers(1000, 10**12), frac=st.integers(0, 99))
def test_german_grouping_with_decimal_comma(n, frac):
    text = f"{n:,}".replace(",", ".") + f",{frac:02d}"
    assert parse_number(text) == pytest.approx(n + frac / 100, rel=1e-15)


def test_non_utf8_bytes_are_a_typed_error_with_line_and_column():
    data = build([{"ID": "0", "Kernel Name": "k", "Metric Name": "m", "Metric Value": "1"}], bom=False, newline="\n")
    lines = data.split(b"\n")
    lines[1] = lines[1].replace(b'"k"', b'"k\xff"', 1).replace(b",k,", b",k\xff,", 1)
    with pytest.raises(TraceError) as exc:
        parse(b"\n".join(lines))
    assert exc.value.code == "not_ncu_csv" and exc.value.details["line"] == 2
    assert exc.value.details["column"] == lines[1].index(b"\xff") + 1


def test_nul_byte_is_data_end_to_end(tmp_path):
    data = build([{"ID": "0", "Kernel Name": "k\x00j", "Metric Name": "m", "Metric Value": "1"}], bom=False,
                 newline="\n")
    ingest_ncu(write(tmp_path, data), tmp_path / "out.duckdb")
    con = duckdb.connect(str(tmp_path / "out.duckdb"), read_only=True)
    assert con.execute("SELECT name FROM ncu_kernels").fetchone()[0] == "k\x00j"
    con.close()


def test_duplicated_identity_column_is_rejected():
    header = ",".join(f'"{h}"' for h in [*HEADER, "Metric Value"])
    with pytest.raises(TraceError) as exc:
        parse(header.encode() + b"\n")
    assert exc.value.code == "not_ncu_csv" and "twice" in exc.value.message
    assert exc.value.details == {"line": 1, "column": len(HEADER) + 1}


def test_repeated_header_of_appended_export_is_skipped():
    one = build([{"ID": "0", "Kernel Name": "a", "Metric Name": "m", "Metric Value": "1"}], bom=False, newline="\n")
    two = build([{"ID": "1", "Kernel Name": "b", "Metric Name": "m", "Metric Value": "2"}], bom=False, newline="\n")
    reader, records = parse(one + two)
    assert [k.name for k in reader.kernels.values()] == ["a", "b"] and len(records) == 2


def test_row_wider_than_header_is_a_typed_error():
    data = build([{"ID": "0", "Kernel Name": "k", "Metric Name": "m", "Metric Value": "1"}], bom=False, newline="\n")
    with pytest.raises(TraceError) as exc:
        parse(data.rstrip(b"\n") + b',"extra"\n')
    assert exc.value.details == {"line": 2, "column": len(HEADER) + 1}


def test_non_integer_id_is_a_typed_error():
    data = build([{"ID": "zero", "Kernel Name": "k", "Metric Name": "m", "Metric Value": "1"}], bom=False, newline="\n")
    with pytest.raises(TraceError) as exc:
        parse(data)
    assert exc.value.details == {"line": 2, "column": 1}


@SETTINGS
@given(head=st.binary(max_size=600))
def test_detection_never_crashes(head):
    from analysis.readers.ncu.reader import looks_like_ncu_csv

    assert looks_like_ncu_csv(head) in (True, False)


number_text = st.one_of(
    st.integers(-(2**70), 2**70).map(str), st.integers(0, 2**40).map(lambda n: f"{n:,}"),
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.sampled_from(["n/a", "", "-", "1e308", "1e-320"]),
)
LAUNCH_METRICS = [("Launch Statistics", "Block Size", ""), ("Launch Statistics", "Grid Size", ""),
                  ("Launch Statistics", "Registers Per Thread", "register/thread"),
                  ("Launch Statistics", "# SMs", "SM"), ("Launch Statistics", "Waves Per SM", ""),
                  ("Launch Statistics", "Static Shared Memory Per Block", "Kbyte/block"),
                  ("GPU Speed Of Light Throughput", "Duration", "msecond"),
                  ("GPU Speed Of Light Throughput", "Compute (SM) Throughput", "%"),
                  ("GPU Speed Of Light Throughput", "Memory Throughput", "%"),
                  ("Occupancy", "Theoretical Occupancy", "%"), ("Occupancy", "Achieved Occupancy", "%"),
                  ("Command line profiler metrics", "launch__grid_dim_x", ""),
                  ("Command line profiler metrics", "device__attribute_compute_capability_major", "")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(ident=st.fixed_dictionaries({"ID": number_text, "Process ID": number_text, "Context": number_text,
                                    "Stream": number_text, "Device": number_text,
                                    "Block Size": st.one_of(number_text, st.tuples(*[st.integers(0, 2**40)] * 3)
                                                            .map(lambda t: f"({t[0]}, {t[1]}, {t[2]})")),
                                    "Grid Size": st.tuples(*[st.integers(0, 2**40)] * 3)
                                    .map(lambda t: f"({t[0]}, {t[1]}, {t[2]})")}),
       values=st.lists(number_text, min_size=len(LAUNCH_METRICS), max_size=len(LAUNCH_METRICS)))
def test_hostile_numbers_ingest_or_raise_typed_error_and_rules_never_crash(tmp_path, ident, values):
    from analysis.diagnosis.rules.base import Registry
    from analysis.diagnosis.rules.ncu import NCU_RULES
    from analysis.model.trace import Run
    from tests.analysis.rule_runner import run_rules

    rows = [{**ident, "Kernel Name": "gemm(int)", "Section Name": sec, "Metric Name": name, "Metric Unit": unit,
             "Metric Value": value} for (sec, name, unit), value in zip(LAUNCH_METRICS, values, strict=True)]
    out = tmp_path / f"{abs(hash((tuple(ident.items()), tuple(values))))}.duckdb"
    try:
        ingest_ncu(write(tmp_path, build(rows, bom=False, newline="\n")), out)
    except TraceError as exc:
        assert exc.code == "not_ncu_csv"
        return
    with Run.open([out]) as run:
        findings, results = run_rules(run, Registry(NCU_RULES))
    assert all(r.status != "error" for r in results), [r.to_dict() for r in results if r.status == "error"]
    for f in findings:
        assert 0 <= f.extra.speedup_pct <= 100 and f.impact_ns >= 0
