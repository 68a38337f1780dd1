"""Deleting a run from the run page: the button only for the submitter or an admin, behind a
confirmation and the form's CSRF token; anyone else gets a 403 page and the run stays."""

from __future__ import annotations

import re

from app.models import Job, Run
from app.services.accounts.users import create_user
from tests.web.conftest import PASSWORD, csrf_of


def _run(db, owner_id: int | None) -> int:
    run = Run(job=Job(name="deletable"), tags={}, submitter="x", submitter_user_id=owner_id, source="web",
              status="ready")
    db.add(run)
    db.commit()
    return run.id


def _sign_in(app, name: str):
    c = app.test_client()
    token = csrf_of(c.get("/login").get_data(as_text=True))
    assert c.post("/login", data={"username": name, "password": PASSWORD, "csrf_token": token}).status_code == 302
    return c


def _form(html: str) -> re.Match | None:
    return re.search(r'<form method="post" action="(/runs/\d+/delete)"[^>]*id="delete-run"\s+data-confirm="([^"]+)">'
                     r'<input type="hidden" name="csrf_token" value="([^"]+)">', html)


def test_the_submitter_deletes_their_run_with_csrf(client, db, user) -> None:
    run_id = _run(db, user.id)
    form = _form(client.get(f"/runs/{run_id}").get_data(as_text=True))
    assert form and form.group(1) == f"/runs/{run_id}/delete" and "cannot be undone" in form.group(2)
    assert client.post(form.group(1), data={}).status_code == 400            # no CSRF token: refused
    assert client.get(f"/runs/{run_id}").status_code == 200                    # ... and the run is still there
    resp = client.post(form.group(1), data={"csrf_token": form.group(3)})
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/")
    assert f"Run #{run_id} deleted" in client.get("/").get_data(as_text=True)
    assert client.get(f"/runs/{run_id}").status_code == 404
    db.expire_all()
    assert db.get(Run, run_id).deleted_at is not None


def test_others_get_no_button_and_a_403_page_but_an_admin_may(app, client, db, user) -> None:
    create_user(db, "bob", PASSWORD)
    create_user(db, "root", PASSWORD, is_admin=True)
    run_id = _run(db, user.id)
    bob = _sign_in(app, "bob")
    html = bob.get(f"/runs/{run_id}").get_data(as_text=True)
    assert _form(html) is None and "Delete run" not in html
    bob_csrf = csrf_of(bob.get("/tokens").get_data(as_text=True))
    resp = bob.post(f"/runs/{run_id}/delete", data={"csrf_token": bob_csrf})
    body = resp.get_data(as_text=True)
    assert resp.status_code == 403 and "Not allowed" in body and "only they or an admin" in body
    assert 'href="/upload"' in body                                            # inside the site's layout
    assert bob.get(f"/runs/{run_id}").status_code == 200                       # still there
    root = _sign_in(app, "root")
    form = _form(root.get(f"/runs/{run_id}").get_data(as_text=True))
    assert form is not None
    assert root.post(form.group(1), data={"csrf_token": form.group(3)}).status_code == 302
    assert root.get(f"/runs/{run_id}").status_code == 404
    assert bob.post(f"/runs/{run_id}/delete", data={"csrf_token": bob_csrf}).status_code == 404
