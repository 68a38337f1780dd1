"""docker-compose.yml agrees with the code: services, commands the CLI accepts, GOODPUT_* variables Settings reads."""

from __future__ import annotations

import importlib
import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from app.settings import Settings
from goodput_cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
GOODPUT_SERVICES = ("migrate", "web", "worker", "beat")


def _env(name: str) -> dict[str, str]:
    return {k: str(v) for k, v in (SERVICES[name].get("environment") or {}).items()}


def _resolved(value: str) -> str:
    """A compose value with ${VAR:-default} replaced by its default (what Settings would parse)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_the_documented_services_exist():
    assert set(SERVICES) == {"web", "worker", "beat", "redis", "postgres", "migrate"}
    assert SERVICES["migrate"]["restart"] == "no"  # one-shot
    for name in ("web", "worker", "beat"):
        assert SERVICES[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", GOODPUT_SERVICES)
def test_every_goodput_variable_is_a_setting_and_parses(name):
    env = _env(name)
    known = {f"GOODPUT_{f.name.upper()}" for f in fields(Settings) if f.name != "extra"}
    goodput_vars = {k: v for k, v in env.items() if k.startswith("GOODPUT_")}
    assert set(goodput_vars) <= known, set(goodput_vars) - known
    assert {"GOODPUT_DATABASE_URL", "GOODPUT_BROKER_URL", "GOODPUT_DATA_DIR", "GOODPUT_SECRET_KEY"} <= set(goodput_vars)
    # Every value (with its default filled in) is accepted by the same parser the service uses.
    parsed = Settings.from_env({k: _resolved(v) for k, v in goodput_vars.items() if "${" not in _resolved(v)})
    assert str(parsed.data_dir) == env["GOODPUT_DATA_DIR"]
    assert parsed.resolved_broker_url == "redis://redis:6379/0"
    assert parsed.resolved_database_url.startswith("postgresql+psycopg://")
    assert "@postgres:5432/" in parsed.resolved_database_url


@pytest.mark.parametrize("name", GOODPUT_SERVICES)
def test_the_data_volume_is_mounted_where_settings_point(name):
    env = _env(name)
    mounts = {m.split(":")[1]: m.split(":")[0] for m in SERVICES[name]["volumes"]}
    assert mounts.get(env["GOODPUT_DATA_DIR"]) == "data"
    assert "data" in COMPOSE["volumes"]


@pytest.mark.parametrize("name", ["migrate", "worker", "beat"])
def test_goodput_commands_parse(name):
    cmd = SERVICES[name]["command"]
    assert cmd[0] == "goodput"
    args = build_parser().parse_args(cmd[1:])
    assert callable(args.func)


def test_worker_consumes_both_queues_and_beat_is_single():
    from app.queue import INGEST_QUEUE, LIGHT_QUEUE

    cmd = SERVICES["worker"]["command"]
    args = build_parser().parse_args(cmd[1:])
    assert set(args.queues.split(",")) == {INGEST_QUEUE, LIGHT_QUEUE}
    assert "deploy" not in SERVICES["beat"] or SERVICES["beat"]["deploy"].get("replicas", 1) == 1


def test_web_runs_gunicorn_on_the_app_factory():
    cmd = SERVICES["web"]["command"]
    assert cmd[0] == "gunicorn"
    spec = cmd[-1]
    module, call = spec.split(":")
    assert call.endswith("()")
    assert callable(getattr(importlib.import_module(module), call[:-2]))
    bind = cmd[cmd.index("--bind") + 1]
    assert SERVICES["web"]["ports"] == [f"{bind.rsplit(':', 1)[1]}:{bind.rsplit(':', 1)[1]}"]


def test_backing_services_match_the_urls():
    env = _env("worker")
    assert SERVICES["postgres"]["environment"]["POSTGRES_DB"] == env["GOODPUT_DATABASE_URL"].rsplit("/", 1)[1]
    assert SERVICES["postgres"]["environment"]["POSTGRES_USER"] == "goodput"
    assert SERVICES["redis"]["command"][0] == "redis-server"


def test_the_image_builds_from_files_that_exist():
    for name in GOODPUT_SERVICES:
        assert SERVICES[name]["build"] == "."
    copies = re.findall(r"^COPY (.+) \S+$", (ROOT / "Dockerfile").read_text(), flags=re.M)
    for line in copies:
        for src in line.split():
            assert (ROOT / src).exists(), src
