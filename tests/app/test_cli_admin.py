"""`goodput migrate`, `token create|list|revoke`, `user create` against the test databases."""

from __future__ import annotations

import io

import sqlalchemy as sa

from app.db import head_revision
from app.models import ApiToken, User
from app.services.accounts import tokens, users
from goodput_cli.main import main


def _env(monkeypatch, settings):
    monkeypatch.setenv("GOODPUT_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("GOODPUT_DATA_DIR", str(settings.data_dir))


def test_token_create_prints_once_list_never_shows_it_revoke_makes_it_401(monkeypatch, capsys, settings,
                                                                          session, client):
    _env(monkeypatch, settings)
    assert main(["token", "create", "--name", "slurm", "--scope", "write"]) == 0
    secret = capsys.readouterr().out.strip()
    assert secret.startswith("gp_") and len(secret) > 40
    row = session.scalar(sa.select(ApiToken).where(ApiToken.name == "slurm"))
    assert row.scope == "write" and row.token_hash == tokens.hash_token(secret)
    h = {"Authorization": f"Bearer {secret}"}
    assert client.post("/api/v1/runs", headers=h, json={"job": "j"}).status_code == 202

    assert main(["token", "list"]) == 0
    listing = capsys.readouterr().out
    assert "slurm" in listing and "active" in listing and secret not in listing and secret[:10] in listing

    assert main(["token", "revoke", str(row.id)]) == 0
    assert client.get("/api/v1/runs", headers=h).status_code == 401
    assert main(["token", "list"]) == 0 and "revoked" in capsys.readouterr().out
    assert main(["token", "revoke", "9999"]) == 2


def test_user_create_reads_password_from_stdin(monkeypatch, capsys, settings, session):
    _env(monkeypatch, settings)
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough password\n"))
    assert main(["user", "create", "ada", "--admin", "--password-stdin"]) == 0
    user = session.scalar(sa.select(User).where(User.username == "ada"))
    assert user.is_admin and user.password_hash != "a long enough password"
    assert users.authenticate_password(session, "ada", "a long enough password").id == user.id
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["user", "create", "bob", "--password-stdin"]) == 2
    assert "at least 8" in capsys.readouterr().err


def test_migrate_then_commands_work_on_a_fresh_database(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GOODPUT_DATA_DIR", str(tmp_path / "fresh"))
    monkeypatch.delenv("GOODPUT_DATABASE_URL", raising=False)
    assert main(["token", "list"]) == 2
    assert "goodput migrate" in capsys.readouterr().err
    assert main(["migrate"]) == 0
    assert f"revision {head_revision()}" in capsys.readouterr().out
    assert main(["migrate"]) == 0  # idempotent
    assert main(["token", "list"]) == 0
