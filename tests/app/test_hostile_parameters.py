"""Parameters an adversary sent and the API took (issue #45 item 8): text that is not UTF-8 in multipart
fields, digits that are not ASCII in ids and numbers, empty threshold overrides and an empty window."""

from __future__ import annotations

import io

import pytest
import sqlalchemy as sa

from app.models import ApiToken, Run


def _multipart(fields: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    body = b"".join(b'--B\r\nContent-Disposition: form-data; name="' + k.encode() + b'"\r\n\r\n' + v + b"\r\n"
                    for k, v in fields) + b"--B--\r\n"
    return body, "multipart/form-data; boundary=B"


@pytest.mark.parametrize(("field", "value"), [
    ("tag", b"k=a\xed\xa0\x80b"),        # an unpaired surrogate, CESU-encoded
    ("cluster", b"eos\xed\xb0\x80"),
    ("window", b"nvtx:a\xed\xa0\x80"),
    ("job", b"train\xff"),               # not UTF-8 at all
], ids=["tag", "cluster", "window", "job"])
def test_multipart_fields_that_are_not_utf8_are_refused(client, auth, session, field, value):
    body, ctype = _multipart([("job", b"j"), (field, value)] if field != "job" else [(field, value)])
    r = client.post("/api/v1/runs", headers={**auth["write"], "Content-Type": ctype}, data=body)
    assert (r.status_code, r.json["error"]["code"]) == (400, "VALIDATION_ERROR"), r.json
    assert field in r.json["error"]["message"]
    assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 0


@pytest.mark.parametrize("digits", ["\uff11", "\u0661", "\u0967", "1\uff10"], ids=["fullwidth", "arabic-indic",
                                                                                 "devanagari", "mixed"])
def test_ids_in_other_digits_name_no_row(client, auth, session, digits):
    tid = session.scalar(sa.select(sa.func.min(ApiToken.id)))
    assert tid == 1
    r = client.delete(f"/api/v1/tokens/{digits}", headers=auth["admin"])
    assert r.status_code == 404, r.json
    session.expire_all()
    assert session.get(ApiToken, 1).revoked_at is None
    assert client.get(f"/api/v1/runs/{digits}", headers=auth["read"]).status_code == 404
    r = client.get(f"/api/v1/compare?base={digits}&head=1", headers=auth["read"])
    assert (r.status_code, r.json["error"]["code"]) == (400, "VALIDATION_ERROR")
    r = client.get(f"/api/v1/runs?page={digits}", headers=auth["read"])
    assert (r.status_code, r.json["error"]["code"]) == (400, "VALIDATION_ERROR")


def test_empty_threshold_overrides_and_an_empty_window_are_refused(client, auth, session):
    cases = [({"threshold": [""]}, "thresholds"), ({"threshold": ["GPU001.min_gap_us=200", " "]}, "thresholds"),
             ({"window": ""}, "window"), ({"window": "  "}, "window")]
    for fields, name in cases:
        r = client.post("/api/v1/runs", headers=auth["write"], content_type="multipart/form-data",
                        data={"job": "j", **fields, "files": [(io.BytesIO(b""), "")]})
        assert (r.status_code, r.json["error"]["code"]) == (400, "VALIDATION_ERROR"), (fields, r.json)
        assert name in r.json["error"]["details"]["fields"], r.json
        body = {"job": "j", **({"thresholds": fields["threshold"]} if "threshold" in fields else fields)}
        r = client.post("/api/v1/runs", headers=auth["write"], json=body)
        assert (r.status_code, r.json["error"]["code"]) == (400, "VALIDATION_ERROR"), (body, r.json)
    assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 0
    ok = client.post("/api/v1/runs", headers=auth["write"], json={"job": "j", "window": "all",
                                                                  "thresholds": ["GPU001.min_gap_us=200"]})
    assert ok.status_code == 202, ok.json
