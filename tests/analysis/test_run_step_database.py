"""The run-level step creates one in-memory DuckDB database and gives each of its users a connection of its own
(``runner.InMemory``, issue #43): creating a database costs 8-10 ms, a connection to it 0.2 ms."""

from __future__ import annotations

from typing import Any

import duckdb
import pytest

from analysis.api import analyze
from analysis.run import runner
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

EXPORT = "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"  # NCCL kernels of two ranks in one report


def test_the_run_step_creates_one_database_for_all_its_users(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ingested(corpus_file(EXPORT))
    before = analyze([path], labels=["r"]).to_json()
    made: list[Any] = []
    users: list[Any] = []
    connect, cursor = runner.connect, runner.cursor

    def counted_connect(*args: Any, **kwargs: Any) -> Any:
        made.append(connect(*args, **kwargs))
        return made[-1]

    def counted_cursor(con: Any) -> Any:
        users.append(cursor(con))
        return users[-1]

    monkeypatch.setattr(runner, "connect", counted_connect)
    monkeypatch.setattr(runner, "cursor", counted_cursor)
    after = analyze([path], labels=["r"]).to_json()
    assert len(made) == 1  # the collective split and the two rules of scope run share it
    assert len(users) >= 3
    assert after == before
    status = {r["id"]: (r["status"], r["findings"]) for r in after["rules"]}
    assert (
        status["COMM002"] == ("ok", 1) and status["COMM005"][0] == "ok"
    )  # both rules ran on the shared database
    assert after["collectives"]["instances"]  # and the collective split
    for con in (*users, made[0]):  # every connection and the database are closed with the step
        with pytest.raises(duckdb.ConnectionException):
            con.execute("SELECT 1")
