"""Uploads through the API: multipart and streaming PUT, compression, caps, sniffing, dedup, storage."""

from __future__ import annotations

import gzip
import hashlib
import io
from dataclasses import replace

import pytest
import sqlalchemy as sa
import zstandard

from app import create_app
from app.models import Report, Run
from tests.app.conftest import queued
from tests.conftest import corpus_file

NSYS = corpus_file("vecadd-2026.sqlite")
NCU = corpus_file("pytorch-sgemm-small.csv")


def _files(data_dir):
    return sorted(p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*") if p.is_file()
                  and p.name != "secret_key")


def _post(client, headers, files, **fields):
    data = {k: v for k, v in fields.items()}
    data["files"] = [(io.BytesIO(content), name) for name, content in files]
    return client.post("/api/v1/runs", headers=headers, data=data, content_type="multipart/form-data")


def test_multipart_upload_creates_queued_reports_stores_by_content_and_enqueues(client, auth, session,
                                                                                 settings, broker):
    nsys, ncu = NSYS.read_bytes(), NCU.read_bytes()
    r = _post(client, auth["write"], [(NSYS.name, nsys), (NCU.name, ncu)], job="llama-70b",
              tag=["team=infra", "nodes=2"], git_sha="ABCDEF1", cluster="eos")
    assert r.status_code == 202, r.json
    run_id = r.json["id"]
    assert r.headers["Location"] == f"/api/v1/runs/{run_id}"
    assert r.json["job"] == "llama-70b" and r.json["tags"] == {"team": "infra", "nodes": "2"}
    assert r.json["git_sha"] == "abcdef1" and r.json["cluster"] == "eos" and r.json["submitter"] == "t-write"
    reports = session.scalars(sa.select(Report).where(Report.run_id == run_id).order_by(Report.id)).all()
    assert [(x.kind, x.status, x.name) for x in reports] == [("nsys", "queued", NSYS.name),
                                                               ("ncu", "queued", NCU.name)]
    for rep, content, suffix in zip(reports, (nsys, ncu), (".sqlite", ".csv"), strict=True):
        sha = hashlib.sha256(content).hexdigest()
        assert (rep.sha256, rep.size_bytes) == (sha, len(content))
        assert rep.upload_path == f"uploads/{sha[:2]}/{sha}{suffix}"  # the suffix tells the worker the format
        assert (settings.data_dir / rep.upload_path).read_bytes() == content
    assert list((settings.data_dir / "staging").iterdir()) == []
    assert queued(broker) == [{"task": "ingest.report", "args": [reports[0].id]},
                              {"task": "ingest.report", "args": [reports[1].id]}]
    assert client.get(r.headers["Location"], headers=auth["read"]).json["reports"][0]["status"] == "queued"


def test_same_bytes_in_one_run_are_stored_once(client, auth, session, settings, broker):
    nsys = NSYS.read_bytes()
    r = _post(client, auth["write"], [("a.sqlite", nsys), ("b.sqlite", nsys)])
    assert r.status_code == 202
    assert len(r.json["reports"]) == 1
    run_id, report_id = r.json["id"], r.json["reports"][0]["id"]
    again = client.put(f"/api/v1/runs/{run_id}/reports/c.sqlite", headers=auth["write"], data=nsys)
    assert again.status_code == 200 and again.json["id"] == report_id
    assert session.scalar(sa.select(sa.func.count()).select_from(Report)) == 1
    assert len(queued(broker)) == 1
    # Another run may hold the same bytes: its own report, one stored file.
    other = _post(client, auth["write"], [("a.sqlite", nsys)])
    assert other.json["reports"][0]["id"] != report_id
    sha = hashlib.sha256(nsys).hexdigest()
    assert _files(settings.data_dir) == [f"uploads/{sha[:2]}/{sha}.sqlite"]


@pytest.mark.parametrize("compress", [gzip.compress, lambda b: zstandard.ZstdCompressor().compress(b),
                                      lambda b: gzip.compress(b[:1000]) + gzip.compress(b[1000:])],
                         ids=["gzip", "zstd", "gzip-multimember"])
def test_compressed_uploads_are_decompressed_as_a_stream(client, auth, settings, compress):
    nsys = NSYS.read_bytes()
    r = _post(client, auth["write"], [("x.sqlite.gz", compress(nsys))])
    assert r.status_code == 202, r.json
    rep = r.json["reports"][0]
    assert rep["sha256"] == hashlib.sha256(nsys).hexdigest() and rep["size_bytes"] == len(nsys)
    assert rep["kind"] == "nsys"
    run = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j"}).json["id"]
    put = client.put(f"/api/v1/runs/{run}/reports/x.zst", headers=auth["write"], data=compress(nsys))
    assert put.status_code == 202 and put.json["sha256"] == rep["sha256"]


BAD = [
    (b"", "EMPTY_FILE"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "NOT_SQLITE"),
    (b"hello, this is plain text and not an export\n" * 10, "UNKNOWN_FORMAT"),
    (gzip.compress(b""), "EMPTY_FILE"),
    (gzip.compress(NSYS.read_bytes())[:5000], "BAD_COMPRESSION"),
]


@pytest.mark.parametrize(("content", "code"), BAD, ids=[c for _, c in BAD])
def test_bad_uploads_fail_with_their_code_and_store_nothing(client, auth, session, settings, broker,
                                                            content, code):
    good = NSYS.read_bytes()
    r = _post(client, auth["write"], [("good.sqlite", good), ("bad.sqlite", content)], job="j")
    assert r.status_code == 422, r.json
    assert r.json["error"]["code"] == code
    assert "bad.sqlite" in r.json["error"]["message"]
    assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 0
    assert _files(settings.data_dir) == []
    run = client.post("/api/v1/runs", headers=auth["write"], json={}).json["id"]
    put = client.put(f"/api/v1/runs/{run}/reports/bad.sqlite", headers=auth["write"], data=content)
    assert (put.status_code, put.json["error"]["code"]) == (422, code)
    assert session.scalar(sa.select(sa.func.count()).select_from(Report)) == 0
    assert _files(settings.data_dir) == [] and queued(broker) == []


def test_size_cap_applies_to_decompressed_bytes(settings, auth, session, broker):
    cap = 100_000
    app = create_app(replace(settings, max_upload_bytes=cap))
    client = app.test_client()
    try:
        bomb = gzip.compress(b"\0" * (50 * cap))  # small on the wire, 50x the cap inflated
        assert len(bomb) < cap
        for body in (bomb, b"x" * (cap + 1)):
            r = _post(client, auth["write"], [("big.sqlite.gz", body)])
            assert (r.status_code, r.json["error"]["code"]) == (413, "TOO_LARGE")
            run = client.post("/api/v1/runs", headers=auth["write"], json={}).json["id"]
            put = client.put(f"/api/v1/runs/{run}/reports/big.gz", headers=auth["write"], data=body)
            assert (put.status_code, put.json["error"]["code"]) == (413, "TOO_LARGE")
        ok = client.put(f"/api/v1/runs/{run}/reports/ok.csv", headers=auth["write"],
                        data=NCU.read_bytes()[:cap] if NCU.stat().st_size > cap else NCU.read_bytes())
        assert ok.status_code == 202
        assert session.scalar(sa.select(sa.func.count()).select_from(Report)) == 1
        assert list((settings.data_dir / "staging").iterdir()) == []
    finally:
        app.extensions["goodput.engine"].dispose()


def test_put_refuses_a_declared_length_over_the_cap_before_reading(settings, auth):
    app = create_app(replace(settings, max_upload_bytes=1000))
    try:
        client = app.test_client()
        run = client.post("/api/v1/runs", headers=auth["write"], json={}).json["id"]
        r = client.put(f"/api/v1/runs/{run}/reports/x.sqlite", headers=auth["write"], data=b"x" * 100_000)
        assert (r.status_code, r.json["error"]["code"]) == (413, "TOO_LARGE")
        assert r.json["error"]["details"] == {"limit_bytes": 1000}
        assert not (settings.data_dir / "staging").exists() or list((settings.data_dir / "staging").iterdir()) == []
    finally:
        app.extensions["goodput.engine"].dispose()


def test_multipart_parts_spool_to_data_dir_staging_not_system_temp(app, auth, settings, monkeypatch):
    import tempfile

    def forbidden(*_a, **_k):
        raise AssertionError("an upload went through the system temp directory")

    monkeypatch.setattr(tempfile, "SpooledTemporaryFile", forbidden)
    monkeypatch.setattr(tempfile, "TemporaryFile", forbidden)
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", forbidden)
    r = _post(app.test_client(), auth["write"], [("x.sqlite", NSYS.read_bytes())])
    assert r.status_code == 202


def test_an_empty_file_input_without_a_name_is_ignored(client, auth):
    r = client.post("/api/v1/runs", headers=auth["write"],
                    data={"job": "j", "files": [(io.BytesIO(b""), ""), (io.BytesIO(NCU.read_bytes()), "a.csv")]})
    assert r.status_code == 202 and [x["name"] for x in r.json["reports"]] == ["a.csv"]


def test_put_to_unknown_or_deleted_run_is_404(client, auth):
    assert client.put("/api/v1/runs/999/reports/x.sqlite", headers=auth["write"],
                      data=b"x").json["error"]["code"] == "RUN_NOT_FOUND"
    run = client.post("/api/v1/runs", headers=auth["write"], json={}).json["id"]
    assert client.delete(f"/api/v1/runs/{run}", headers=auth["write"]).status_code == 202
    r = client.put(f"/api/v1/runs/{run}/reports/x.sqlite", headers=auth["write"], data=NSYS.read_bytes())
    assert (r.status_code, r.json["error"]["code"]) == (404, "RUN_NOT_FOUND")


@pytest.mark.parametrize(("fields", "bad"), [
    ({"job": "bad job name!"}, "job"), ({"tag": ["novalue"]}, "tags"), ({"git_sha": "xyz"}, "git_sha"),
    ({"source": "email"}, "source"),
])
def test_invalid_metadata_is_a_validation_error(client, auth, session, fields, bad):
    r = _post(client, auth["write"], [("x.sqlite", NSYS.read_bytes())], **fields)
    assert r.status_code == 400 and r.json["error"]["code"] == "VALIDATION_ERROR"
    assert bad in r.json["error"]["details"]["fields"]
    assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 0


def test_client_file_names_never_become_paths(client, auth, settings):
    r = _post(client, auth["write"], [("../../etc/passwd.sqlite", NSYS.read_bytes())])
    assert r.status_code == 202
    assert r.json["reports"][0]["name"] == "passwd.sqlite"
    assert all(p.startswith("uploads/") for p in _files(settings.data_dir))


def _zstd_bomb(head: bytes, total: int) -> bytes:
    """``head`` then zeros up to ``total`` bytes, zstd-compressed as a stream (a few KB for hundreds of MB)."""
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(out, closefd=False) as w:
        w.write(head)
        zeros = bytes(1 << 20)
        left = total - len(head)
        while left > 0:
            w.write(zeros[:left])
            left -= len(zeros)
    return out.getvalue()


def _forged_header(pages: int) -> bytes:
    head = bytearray(NSYS.read_bytes()[:100])
    head[28:32] = pages.to_bytes(4, "big")
    return bytes(head)


@pytest.mark.parametrize(("head", "why"), [
    (NSYS.read_bytes()[:100], "longer than its header says"),       # a real header: 610,304 bytes stated
    (_forged_header(2**31), "expands more than"),                    # a header stating 8 TiB
    (b"ID,Kernel Name\n", "expands more than"),                      # not SQLite at all
], ids=["sqlite-header", "forged-page-count", "not-sqlite"])
def test_a_compression_bomb_is_refused_while_small_and_leaves_nothing(client, auth, session, settings, broker,
                                                                     head, why):
    """Issue #45 item 7: 65 KB of zstd with SQLite magic was accepted and written out as 2 GB. Now the
    expansion is bounded (after 64 MiB, 250x the compressed bytes) and a SQLite file no longer than its header
    says, for multipart and PUT alike."""
    bomb = _zstd_bomb(head, 300 * 2**20)
    assert len(bomb) < 100_000
    r = _post(client, auth["write"], [("bomb.sqlite.zst", bomb)], job="j")
    assert (r.status_code, r.json["error"]["code"]) == (422, "BAD_COMPRESSION"), r.json
    assert why in r.json["error"]["message"]
    run = client.post("/api/v1/runs", headers=auth["write"], json={}).json["id"]
    put = client.put(f"/api/v1/runs/{run}/reports/bomb.sqlite", headers=auth["write"], data=bomb)
    assert (put.status_code, put.json["error"]["code"]) == (422, "BAD_COMPRESSION")
    assert session.scalar(sa.select(sa.func.count()).select_from(Report)) == 0
    assert _files(settings.data_dir) == [] and queued(broker) == []


def test_a_compressed_file_with_sqlite_magic_and_no_sqlite_header_is_refused_at_once(client, auth, session):
    body = zstandard.ZstdCompressor().compress(b"SQLite format 3\x00" + b"\xff" * 84 + bytes(10_000))
    r = _post(client, auth["write"], [("x.sqlite.zst", body)], job="j")
    assert (r.status_code, r.json["error"]["code"]) == (422, "NOT_SQLITE"), r.json
    assert session.scalar(sa.select(sa.func.count()).select_from(Report)) == 0


def test_an_upload_retried_with_its_idempotency_key_gets_the_same_run(client, auth, session, settings, broker):
    """Issue #45 item 3: a retry after a lost response created a second run. With the same Idempotency-Key the
    same caller gets the first run back (200, nothing new stored or queued); another caller, or another key,
    gets a new run; a malformed key is refused; a deleted run is not handed back."""
    nsys = NSYS.read_bytes()
    key = {"Idempotency-Key": "9b2f4c1e-run-1"}
    first = _post(client, {**auth["write"], **key}, [(NSYS.name, nsys)], job="j")
    assert first.status_code == 202, first.json
    tasks = len(queued(broker))
    again = _post(client, {**auth["write"], **key}, [(NSYS.name, nsys)], job="j")
    assert (again.status_code, again.json["id"]) == (200, first.json["id"])
    assert again.headers["Idempotent-Replayed"] == "true" and again.headers["Location"] == first.headers["Location"]
    assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 1 and len(queued(broker)) == tasks
    other = _post(client, {**auth["admin"], **key}, [(NSYS.name, nsys)], job="j")  # another token, same key
    assert other.status_code == 202 and other.json["id"] != first.json["id"]
    for bad in ("", "a b", "é", "x" * 256):
        r = _post(client, {**auth["write"], "Idempotency-Key": bad}, [(NSYS.name, nsys)], job="j")
        assert (r.status_code, r.json["error"]["code"]) == (400, "VALIDATION_ERROR"), bad
    assert client.delete(f"/api/v1/runs/{first.json['id']}", headers=auth["write"]).status_code in (202, 204)
    gone = _post(client, {**auth["write"], **key}, [(NSYS.name, nsys)], job="j")
    assert (gone.status_code, gone.json["error"]["code"]) == (409, "RUN_DELETED")
    assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 2
