"""Scalar parameters written into SQL as typed literals (analysis.model.trace.inline_params): the same answers as
bound parameters for any value, hostile text included, and no pandas import on the analysis path."""

from __future__ import annotations

import subprocess
import sys

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.model.trace import inline_params
from tests.conftest import ROOT, corpus_file

texts = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**100), 2**100),
                    st.floats(allow_nan=False), texts)


@settings(max_examples=200, deadline=None)
@given(a=scalars, b=st.lists(texts, max_size=5), c=texts)
def test_literals_answer_like_bound_parameters(a, b, c):
    con = duckdb.connect()
    sql = "SELECT $a, $b::VARCHAR[], $c, $c || '$a', typeof($a)"
    params = {"a": a, "b": b, "c": c}
    query, bound = inline_params(sql, params)
    assert bound == []  # everything was inlined
    assert con.execute(query).fetchall() == con.execute(sql, params).fetchall()


def test_values_that_cannot_be_literals_stay_bound():
    query, bound = inline_params("SELECT $a", {"a": "nul\x00inside"})
    assert query == "SELECT $a" and bound == {"a": "nul\x00inside"}
    assert duckdb.connect().execute(query, bound).fetchall() == [("nul\x00inside",)]


def test_the_analysis_of_a_report_does_not_import_pandas(tmp_path):
    # DuckDB's Python client imports pandas (0.5 s) the first time a query binds a parameter.
    code = (
        "import sys; from pathlib import Path; from analysis.api import analyze, ingest; "
        f"out = ingest(Path({str(corpus_file('cupy-power-iteration.sqlite'))!r}), Path({str(tmp_path / 'r.duckdb')!r})).out; "
        "analyze([out]).to_json(); print('pandas' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_integer_literals_take_the_type_duckdb_binds_at_every_boundary():
    # INTEGER, BIGINT, UBIGINT (2^63..2^64-1, found by the property test in a clean-clone run), HUGEINT.
    con = duckdb.connect()
    for v in (2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 2**120):
        query, bound = inline_params("SELECT $a, typeof($a)", {"a": v})
        assert bound == [] and con.execute(query).fetchall() == con.execute("SELECT $a, typeof($a)", {"a": v}).fetchall()
