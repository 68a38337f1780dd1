"""`goodput upload`: send exports to a Goodput server as one run, for job schedulers (Slurm epilogues, CI).

The files go in one streamed multipart ``POST /api/v1/runs`` (never read whole into memory), with
progress on stderr; transient network errors and 502/503/504 are retried with exponential backoff.
Exit status: 0 done, 1 a report failed (with ``--wait``) or the server kept failing, 2 bad input.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from analysis import fmt
from goodput_cli.errors import UploadError, UsageError

RETRY_STATUSES = (502, 503, 504)
BACKOFF_S = (1, 2, 4, 8, 16)
CHUNK = 1 << 20


def add_command(sub: argparse._SubParsersAction) -> None:
    from goodput_cli.offline import ThresholdsHelp

    p = sub.add_parser("upload", help="upload exports to a Goodput server as one run", formatter_class=ThresholdsHelp)
    p.add_argument("files", nargs="+", metavar="FILE", help="nsys .sqlite or ncu .csv exports, NCCL debug logs (gzip/zstd ok)")
    p.add_argument("--server", required=True, help="base URL, e.g. http://goodput:8000")
    p.add_argument("--token", default=None, help="API token with write scope (default: $GOODPUT_TOKEN)")
    p.add_argument("--job", required=True, help="the job this run belongs to, e.g. llama-70b-pretrain")
    p.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--git-sha", default=None)
    p.add_argument("--cluster", default=None)
    p.add_argument("--window", default=None, metavar="SPEC",
                   help="analysis window: steady (default), all, startup, nvtx:NAME, iterations:A-B, time:T0-T1")
    p.add_argument("--threshold", action="append", default=[], metavar="RULE.name=VALUE",
                   help="override a rule threshold for this run's analyses, e.g. GPU001.min_gap_us=200 (repeatable)")
    p.add_argument("--wait", action="store_true", help="wait for the analysis; exit 1 when a report failed")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait waits at most (default 3600)")
    p.add_argument("--retries", type=int, default=len(BACKOFF_S),
                   help=f"retries of a failed request, waiting 1, 2, 4... s (default {fmt.count(len(BACKOFF_S))})")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_upload)


def cmd_upload(args: argparse.Namespace) -> int:
    # Scheduler scripts pass the token in the environment so it stays out of `ps` listings.
    token = args.token or os.environ.get("GOODPUT_TOKEN", "")
    try:
        files = _check_input(args, token)
    except UploadError as exc:
        raise UsageError(str(exc)) from None
    if args.retries < 0:
        raise UsageError(f"--retries {args.retries}: expected 0 or more")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout {fmt.exact(args.timeout)}: expected a number of seconds above 0")
    backoff = tuple(min(2**i, 60) for i in range(args.retries))
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
    # A run whose reports do not fit together (missing ranks, another job or clock, ranks sharing a CPU): said,
    # not failed. The last poll carries them (``RunDetail.run_warnings``); an older server only in the summary.
    warnings = final.get("run_warnings")
    if warnings is None:
        try:
            warnings = client.summary(run_id).get("run_warnings")
        except UploadError as exc:
            print(f"goodput: WARNING: could not read the warnings of run {run_id}: {exc}", file=sys.stderr)
    for w in warnings or []:
        print(f"goodput: WARNING ({w.get('code')}) in run {run_id}: {w.get('message')}", file=sys.stderr)
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
    if args.window:
        fields.append(("window", args.window))
    fields += [("threshold", t) for t in args.threshold]
    return fields


class MultipartBody:
    """A multipart/form-data body read in chunks from the files, with a known length (no chunked encoding)."""

    def __init__(self, fields: list[tuple[str, str]], files: list[Path],
                 progress: UploadProgress | None = None) -> None:
        self.boundary = uuid.uuid4().hex
        self.parts: list[bytes | Path] = []
        for name, value in fields:
            self.parts.append(self._head(name) + value.encode() + b"\r\n")
        for path in files:
            self.parts.append(self._head("files", path.name))
            self.parts.append(path)
            self.parts.append(b"\r\n")
        self.parts.append(f"--{self.boundary}--\r\n".encode())
        self.sizes = {p: p.stat().st_size for p in self.parts if isinstance(p, Path)}
        self.total = sum(self.sizes[p] if isinstance(p, Path) else len(p) for p in self.parts)
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
        for part in self.parts:
            if isinstance(part, bytes):
                yield part
                continue
            size = self.sizes[part]
            if self.progress:
                self.progress.start_file(part.name, size)
            for chunk in _file_chunks(part, size):
                if self.progress:
                    self.progress.sent(len(chunk))
                yield chunk
            if self.progress:
                self.progress.end_file()


def _file_chunks(path: Path, size: int):
    """Exactly ``size`` bytes of ``path`` (its size when the body's length was computed). A file that shrank
    or grew meanwhile is an UploadError naming it: the body would not match its Content-Length, and the
    server would wait for bytes that never come, then the failure would look like the network's."""
    sent = 0
    with path.open("rb") as fh:
        while sent < size:
            chunk = fh.read(min(CHUNK, size - sent))
            if not chunk:
                raise UploadError(f"{path}: the file was truncated while it was being sent ({fmt.count(size)} bytes when "
                                  f"the upload started, {fmt.count(sent)} now); upload it once it is complete", 2)
            sent += len(chunk)
            yield chunk
        if fh.read(1):
            raise UploadError(f"{path}: the file grew while it was being sent (from {fmt.count(size)} bytes); upload it "
                              "once it is complete", 2)


def _mb(n: float) -> str:
    return fmt.size(n)


class UploadProgress:
    """Per file on stderr: bytes sent of its size and the speed, redrawn on a terminal; a line per file
    (and per 10 % of a large one) otherwise. Then, with --wait, the server's ingest and analysis progress."""

    def __init__(self, quiet: bool, stream=None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.name, self.size, self.done, self.t0 = "", 0, 0, 0.0
        self.last = 0.0
        self.last_decile = -1
        self.last_status = ""

    def _write(self, text: str, *, final: bool) -> None:
        if self.tty:
            self.stream.write("\r" + text[:200] + "\x1b[K" + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _line(self) -> str:
        elapsed = max(1e-6, time.monotonic() - self.t0)
        pct = 100.0 * self.done / self.size if self.size else 100.0
        name = "".join(c if c.isprintable() else "?" for c in self.name)
        return (f"goodput: {name}: sent {_mb(self.done)} of {_mb(self.size)} ({fmt.share(pct)}) "
                f"at {fmt.rate(self.done / elapsed)}")

    def start_file(self, name: str, size: int) -> None:
        self.name, self.size, self.done, self.t0 = name, size, 0, time.monotonic()
        self.last, self.last_decile = 0.0, 0

    def sent(self, n: int) -> None:
        self.done += n
        if self.quiet or self.done >= self.size:
            return
        now = time.monotonic()
        if self.tty and now - self.last >= 0.2:
            self.last = now
            self._write(self._line(), final=False)
        elif not self.tty and self.size >= 100 * CHUNK and int(10 * self.done / self.size) > self.last_decile:
            self.last_decile = int(10 * self.done / self.size)
            self._write(self._line(), final=False)

    def end_file(self) -> None:
        if not self.quiet:
            self._write(self._line() + f" in {fmt.elapsed(time.monotonic() - self.t0)}", final=True)

    def server(self, run: dict[str, Any]) -> None:
        """The run as the server reports it: each report's status and ingest progress, the analysis."""
        if self.quiet:
            return
        parts = []
        for r in run.get("reports") or []:
            name = "".join(c if c.isprintable() else "?" for c in str(r.get("name") or r.get("id")))
            status = str(r.get("status"))
            prog = r.get("progress") if isinstance(r.get("progress"), dict) else {}
            total, done = prog.get("total") or 0, prog.get("done") or 0
            if status == "ingesting" and isinstance(total, int) and total > 1:
                status += f" {prog.get('stage')} {min(100, 100 * done // total)}%"
            parts.append(f"{name} {status}")
        parts.append(f"analysis {run.get('analysis_status') or 'waiting'}")
        text = f"goodput: run {run.get('id')}: " + ", ".join(parts)
        if self.tty:
            final = run.get("status") in ("ready", "failed")
            self._write(text, final=final)
        elif text != self.last_status:
            self._write(text, final=True)
        self.last_status = text


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
        raise UploadError(f"{last} (gave up after {fmt.count(len(self.backoff) + 1)} tries)", 1)

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
        fields = (err.get("details") or {}).get("fields") if isinstance(err.get("details"), dict) else None
        if isinstance(fields, dict) and fields:   # which field and why ("thresholds: unknown rule GPU999")
            message += " " + "; ".join(f"{k}: {' '.join(str(v).split())}" for k, v in fields.items())  # one line
        # A client mistake (bad token, bad file, bad field) will not change on retry: exit 2.
        status = 2 if 400 <= resp.status_code < 500 else 1
        raise UploadError(f"{method} {path}: {code}: {message}", status)

    def create_run(self, files: list[Path], fields: list[tuple[str, str]]) -> dict[str, Any]:
        # One key for every try of this upload: a retry after a lost response (the server committed the run,
        # then died) gets that run back instead of creating a second one.
        key = uuid.uuid4().hex

        def kwargs() -> dict:
            body = MultipartBody(fields, files, UploadProgress(self.quiet))  # fresh stream for every try
            return {"data": body, "headers": {"Content-Type": body.content_type, "Content-Length": str(len(body)),
                                              "Idempotency-Key": key}}

        return self._request("POST", "/api/v1/runs", kwargs)

    def compare(self, base: int, head: int, *, noise_pct: float) -> dict[str, Any]:
        """The server's comparison of two runs (``GET /api/v1/compare``)."""
        return self._request("GET", f"/api/v1/compare?base={int(base)}&head={int(head)}&noise_pct={noise_pct:g}",
                             dict)

    def summary(self, run_id: Any) -> dict[str, Any]:
        """The run's analysis summary (``GET /api/v1/runs/{id}/summary``)."""
        return self._request("GET", f"/api/v1/runs/{run_id}/summary", dict)

    def get_run(self, run_id: Any) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/runs/{run_id}", dict)

    def wait(self, run_id: Any, *, timeout_s: float, poll_s: float = 2.0) -> dict[str, Any]:
        """Poll until the run is ready or failed; UploadError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        shown = UploadProgress(self.quiet)
        while True:
            run = self.get_run(run_id)
            shown.server(run)
            if run.get("status") in ("ready", "failed"):
                return run
            if time.monotonic() > deadline:
                raise UploadError(f"run {run_id} still {run.get('status')} after {fmt.elapsed(timeout_s)}", 1)
            time.sleep(poll_s)
