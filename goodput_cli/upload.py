"""`goodput upload`: send exports to a Goodput server as one run, for job schedulers (Slurm epilogues, CI).

The files go in one streamed multipart ``POST /api/v1/runs`` (never read whole into memory), with
progress on stderr; transient network errors and 502/503/504 are retried with exponential backoff.
Exit status: 0 done, 1 a report failed (with ``--wait``) or the server kept failing, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

RETRY_STATUSES = (502, 503, 504)
BACKOFF_S = (1, 2, 4, 8, 16)
CHUNK = 1 << 20


class UploadError(Exception):
    """A failure to report in one line; ``status`` is the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def add_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("upload", help="upload exports to a Goodput server as one run")
    p.add_argument("files", nargs="+", metavar="FILE", help="nsys .sqlite or ncu .csv exports (gzip/zstd ok)")
    p.add_argument("--server", required=True, help="base URL, e.g. http://goodput:8000")
    p.add_argument("--token", default=None, help="API token with write scope (default: $GOODPUT_TOKEN)")
    p.add_argument("--job", required=True, help="the job this run belongs to, e.g. llama-70b-pretrain")
    p.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--git-sha", default=None)
    p.add_argument("--cluster", default=None)
    p.add_argument("--wait", action="store_true", help="wait for the analysis; exit 1 when a report failed")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait waits at most (default 3600)")
    p.add_argument("--retries", type=int, default=len(BACKOFF_S),
                   help=f"retries of a failed request, waiting 1, 2, 4... s (default {len(BACKOFF_S)})")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_upload)


def cmd_upload(args: argparse.Namespace) -> int:
    from goodput_cli.main import UsageError

    # Scheduler scripts pass the token in the environment so it stays out of `ps` listings.
    token = args.token or os.environ.get("GOODPUT_TOKEN", "")
    try:
        files = _check_input(args, token)
    except UploadError as exc:
        raise UsageError(str(exc)) from None
    backoff = tuple(min(2**i, 60) for i in range(max(0, args.retries)))
    client = Client(args.server, token, quiet=args.quiet, backoff=backoff)
    try:
        run = client.create_run(files, _fields(args))
        run_id = run["id"]
        print(client.run_url(run_id), flush=True)
        if not args.wait:
            return 0
        final = client.wait(run_id, timeout_s=args.timeout)
    except UploadError as exc:
        if exc.status == 2:
            raise UsageError(str(exc)) from None
        print(f"goodput: {exc}", file=sys.stderr)
        return exc.status
    failed = [r for r in final.get("reports", []) if r.get("status") == "failed"]
    for r in failed:
        err = r.get("error") or {}
        code = err.get("code") if isinstance(err, dict) else r.get("error_code")
        msg = err.get("message") if isinstance(err, dict) else r.get("error_message")
        print(f"goodput: {r.get('name')}: {code}: {msg}", file=sys.stderr)
    if failed or final.get("status") == "failed":
        if not failed:
            print(f"goodput: run {run_id} failed: {final.get('error') or 'analysis failed'}", file=sys.stderr)
        return 1
    return 0


def _check_input(args: argparse.Namespace, token: str) -> list[Path]:
    parts = urlsplit(args.server)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UploadError(f"--server {args.server!r} is not an http(s) URL", 2)
    if not token:
        raise UploadError("no token: pass --token or set GOODPUT_TOKEN (create one with `goodput token create`)", 2)
    for tag in args.tag:
        if "=" not in tag or not tag.split("=", 1)[0].strip():
            raise UploadError(f"--tag {tag!r} is not KEY=VALUE", 2)
    files = []
    for name in args.files:
        path = Path(name)
        if not path.is_file():
            raise UploadError(f"{name}: no such file", 2)
        if not os.access(path, os.R_OK):
            raise UploadError(f"{name}: not readable", 2)
        if path.stat().st_size == 0:
            raise UploadError(f"{name}: the file is empty (0 bytes); export the report again", 2)
        files.append(path)
    return files


def _fields(args: argparse.Namespace) -> list[tuple[str, str]]:
    fields = [("job", args.job), ("source", "cli")]
    fields += [("tag", t) for t in args.tag]
    if args.git_sha:
        fields.append(("git_sha", args.git_sha))
    if args.cluster:
        fields.append(("cluster", args.cluster))
    return fields


class MultipartBody:
    """A multipart/form-data body read in chunks from the files, with a known length (no chunked encoding)."""

    def __init__(self, fields: list[tuple[str, str]], files: list[Path],
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.boundary = uuid.uuid4().hex
        self.parts: list[bytes | Path] = []
        for name, value in fields:
            self.parts.append(self._head(name) + value.encode() + b"\r\n")
        for path in files:
            self.parts.append(self._head("files", path.name))
            self.parts.append(path)
            self.parts.append(b"\r\n")
        self.parts.append(f"--{self.boundary}--\r\n".encode())
        self.total = sum(p.stat().st_size if isinstance(p, Path) else len(p) for p in self.parts)
        self.progress = progress

    def _head(self, name: str, filename: str | None = None) -> bytes:
        disp = f'form-data; name="{name}"'
        if filename is not None:
            safe = filename.replace('"', "_").replace("\r", "_").replace("\n", "_")
            disp += f'; filename="{safe}"'
        ctype = "\r\nContent-Type: application/octet-stream" if filename is not None else ""
        return f"--{self.boundary}\r\nContent-Disposition: {disp}{ctype}\r\n\r\n".encode()

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def __len__(self) -> int:
        return self.total

    def __iter__(self):
        # requests streams an iterable with a length as a plain (not chunked) body, chunk by chunk.
        sent = 0
        for part in self.parts:
            chunks = [part] if isinstance(part, bytes) else _file_chunks(part)
            for chunk in chunks:
                sent += len(chunk)
                if self.progress:
                    self.progress(sent, self.total)
                yield chunk


def _file_chunks(path: Path):
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


class Progress:
    """Upload progress on stderr: a rewritten line on a terminal, a line per 10 % otherwise."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.last_decile = -1

    def __call__(self, done: int, total: int) -> None:
        if self.quiet or not total:
            return
        pct = 100.0 * done / total
        if self.tty:
            now = time.monotonic()
            if now - self.last >= 0.2 or done == total:
                self.last = now
                end = "\n" if done == total else ""
                print(f"\rgoodput: uploaded {done / 1e6:.1f} / {total / 1e6:.1f} MB ({pct:.0f}%)",
                      end=end, file=sys.stderr, flush=True)
        elif int(pct // 10) > self.last_decile:
            self.last_decile = int(pct // 10)
            print(f"goodput: uploaded {done / 1e6:.1f} / {total / 1e6:.1f} MB ({pct:.0f}%)", file=sys.stderr)


class Client:
    """The few API calls `goodput upload` needs, with retries on transient failures."""

    def __init__(self, server: str, token: str, *, quiet: bool = False, backoff: tuple[float, ...] = BACKOFF_S):
        import requests

        self.server = server.rstrip("/")
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"
        self.http.headers["User-Agent"] = "goodput-upload"
        self.quiet = quiet
        self.backoff = backoff

    def run_url(self, run_id: Any) -> str:
        return f"{self.server}/runs/{run_id}"

    def _request(self, method: str, path: str, make_kwargs: Callable[[], dict]) -> Any:
        import requests

        last = ""
        for attempt in range(len(self.backoff) + 1):
            if attempt:
                time.sleep(self.backoff[attempt - 1])
            try:
                resp = self.http.request(method, self.server + path, timeout=(10, 600), **make_kwargs())
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"cannot reach {self.server}: {type(exc).__name__}"
                self._note(f"{last}; retrying")
                continue
            if resp.status_code in RETRY_STATUSES:
                last = f"{method} {path}: HTTP {resp.status_code}"
                self._note(f"{last}; retrying")
                continue
            return self._decode(method, path, resp)
        raise UploadError(f"{last} (gave up after {len(self.backoff) + 1} tries)", 1)

    def _note(self, text: str) -> None:
        if not self.quiet:
            print(f"goodput: {text}", file=sys.stderr)

    @staticmethod
    def _decode(method: str, path: str, resp) -> Any:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code < 400 and isinstance(body, dict):
            return body
        err = body.get("error", {}) if isinstance(body, dict) else {}
        code = err.get("code") or f"HTTP_{resp.status_code}"
        message = err.get("message") or resp.reason or "unexpected response"
        # A client mistake (bad token, bad file, bad field) will not change on retry: exit 2.
        status = 2 if 400 <= resp.status_code < 500 else 1
        raise UploadError(f"{method} {path}: {code}: {message}", status)

    def create_run(self, files: list[Path], fields: list[tuple[str, str]]) -> dict[str, Any]:
        def kwargs() -> dict:
            body = MultipartBody(fields, files, Progress(self.quiet))  # fresh stream for every try
            return {"data": body, "headers": {"Content-Type": body.content_type, "Content-Length": str(len(body))}}

        return self._request("POST", "/api/v1/runs", kwargs)

    def compare(self, base: int, head: int, *, noise_pct: float) -> dict[str, Any]:
        """The server's comparison of two runs (``GET /api/v1/compare``)."""
        return self._request("GET", f"/api/v1/compare?base={int(base)}&head={int(head)}&noise_pct={noise_pct:g}",
                             dict)

    def get_run(self, run_id: Any) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/runs/{run_id}", dict)

    def wait(self, run_id: Any, *, timeout_s: float, poll_s: float = 2.0) -> dict[str, Any]:
        """Poll until the run is ready or failed; UploadError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.get_run(run_id)
            if run.get("status") in ("ready", "failed"):
                return run
            if time.monotonic() > deadline:
                raise UploadError(f"run {run_id} still {run.get('status')} after {timeout_s:.0f} s", 1)
            time.sleep(poll_s)
