"""Browser-test harness: the real service (`goodput serve`: gunicorn, a Celery worker, beat) on a temp data
dir, and Debian's Chromium driven by Playwright. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import requests

from app.db import make_engine, make_sessionmaker
from app.settings import Settings
from tests.conftest import ROOT
from tests.web import seed

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SHOTS = ROOT / "artifacts" / "screenshots"
USER, PASSWORD = "alice", "browser-test-password"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Service:
    url: str
    settings: Settings
    proc: subprocess.Popen
    log: Path

    def session(self):
        engine = make_engine(self.settings.resolved_database_url)
        return engine, make_sessionmaker(engine)()


def _goodput(env: dict[str, str], *args: str, stdin: str | None = None) -> None:
    subprocess.run([sys.executable, "-m", "goodput_cli.main", *args], env=env, input=stdin, text=True,
                   check=True, capture_output=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="session")
def service(tmp_path_factory):
    """`goodput serve` (one web process, one worker process), exactly as `make run` starts it."""
    data = tmp_path_factory.mktemp("service") / "data"
    port = _free_port()
    env = {**os.environ, "GOODPUT_DATA_DIR": str(data), "GOODPUT_PORT": str(port), "GOODPUT_HOST": "127.0.0.1",
           "GOODPUT_SECRET_KEY": "browser-tests", "PYTHONUNBUFFERED": "1"}
    for key in ("GOODPUT_DATABASE_URL", "GOODPUT_BROKER_URL"):
        env.pop(key, None)
    _goodput(env, "migrate")
    _goodput(env, "user", "create", USER, "--password-stdin", stdin=PASSWORD + "\n")
    log = data.parent / "serve.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "goodput_cli.main", "serve", "--workers", "1",
                                 "--concurrency", "1"], env=env, stdout=fh, stderr=subprocess.STDOUT,
                                cwd=ROOT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(url + "/login", timeout=2).status_code == 200:
                break
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("goodput serve did not come up:\n" + log.read_text()[-4000:])
        time.sleep(0.3)
    settings = replace(Settings(), data_dir=data)
    yield Service(url, settings, proc, log)
    proc.send_signal(signal.SIGTERM)  # serve stops gunicorn, beat and the worker in order
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="session")
def ingested(tmp_path_factory) -> seed.Ingested:
    return seed.Ingested(tmp_path_factory.mktemp("ingested"))


@pytest.fixture(scope="session")
def store(service, ingested):
    """store(sources, **run fields) -> run id, written into the service's metadata DB and data dir."""
    engine, session = service.session()

    def _store(sources, **kw) -> int:
        return seed.store_run(session, service.settings, ingested, list(sources), **kw)

    _store.finish_analysis = lambda run_id: seed.finish_analysis(session, service.settings, run_id)
    yield _store
    session.close()
    engine.dispose()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Watched:
    """A page plus what must stay empty: JS dialogs (alert/confirm) and console errors."""

    page: object
    dialogs: list
    errors: list
    accept_dialogs: bool = False   # set by a test that expects a confirm() (e.g. revoking a token)

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    def shot_of(self, selector: str, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.locator(selector).screenshot(path=str(SHOTS / f"{name}.png"))


@pytest.fixture
def watched(browser, service):
    context = browser.new_context(base_url=service.url, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    watched = Watched(page, [], [])

    def on_dialog(d):
        watched.dialogs.append(d.message)
        d.accept() if watched.accept_dialogs else d.dismiss()

    page.on("dialog", on_dialog)
    page.on("console", lambda m: watched.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: watched.errors.append(str(e)))
    yield watched
    context.close()


@pytest.fixture
def signed_in(watched):
    page = watched.page
    page.goto("/login")
    page.fill("#username", USER)
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/")
    return watched
