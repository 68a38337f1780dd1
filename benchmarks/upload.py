"""Upload throughput: a 2 GB export streamed through `PUT /api/v1/runs/{id}/reports/{name}` (gunicorn,
sha256 + staging + content-addressed store) against a plain file copy on the same disk, in one run: the
steps interleaved in rotated order, the source's page cache dropped before each, medians of ``--repeat``
rounds, wall time and CPU (for the upload: the sending client's plus gunicorn's) of each.

    .venv/bin/python benchmarks/upload.py [--size-gb 2] [--repeat 3] [--client sendfile|curl] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._server import gunicorn  # noqa: E402

SQLITE_MAGIC = b"SQLite format 3\x00"
BLOCK = 64 * 1024 * 1024


def make_file(path: Path, size: int) -> None:
    """An SQLite-headed file of incompressible bytes (the upload path sniffs only the header)."""
    block = bytearray(os.urandom(BLOCK))
    block[: len(SQLITE_MAGIC)] = SQLITE_MAGIC
    with path.open("wb") as fh:
        written = 0
        while written < size:
            n = min(BLOCK, size - written)
            fh.write(block[:n])
            written += n
            block[len(SQLITE_MAGIC): len(SQLITE_MAGIC) + 8] = written.to_bytes(8, "little")  # no two blocks equal


def _cpu() -> float:
    """User + system CPU of this process (the copies, the sending client) and its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def drop_cache_hint(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed_copy(src: Path, dst: Path) -> float:
    """cp's way (copy_file_range) plus fsync: the upload is fsynced before its row is committed too."""
    t = time.perf_counter()
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t


def timed_user_copy(src: Path, dst: Path) -> float:
    """read(2)/write(2) of 1 MiB blocks plus fsync (what `dd bs=1M conv=fsync` does): the byte copies
    through user space that any server receiving a body must make, without HTTP or hashing."""
    t = time.perf_counter()
    with src.open("rb", buffering=0) as fin, dst.open("wb", buffering=0) as fout:
        while block := fin.read(1024 * 1024):
            fout.write(block)
        os.fsync(fout.fileno())
    return time.perf_counter() - t


def timed_upload(url: str, token: str, run_id: int, src: Path, client: str) -> tuple[float, dict]:
    import json

    if client == "curl":  # a C client, as a scheduler's epilogue might use
        import subprocess

        t = time.perf_counter()
        out = subprocess.run(["curl", "-sS", "-f", "-T", str(src), "-H", f"Authorization: Bearer {token}",
                              f"{url}/api/v1/runs/{run_id}/reports/big.sqlite"], check=True,
                             capture_output=True).stdout
        return time.perf_counter() - t, json.loads(out)

    # The request written by hand so the body goes out with sendfile(2), as an efficient client
    # (or a proxy) would send it; http.client would copy every block through Python.
    host, port = url.removeprefix("http://").split(":")
    size = src.stat().st_size
    t = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=600) as sock, src.open("rb") as fh:
        head = (f"PUT /api/v1/runs/{run_id}/reports/big.sqlite HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\n"
                f"Content-Length: {size}\r\nConnection: close\r\n\r\n")
        sock.sendall(head.encode())
        sock.sendfile(fh)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        body = json.loads(resp.read())
    elapsed = time.perf_counter() - t
    if resp.status != 202:
        raise RuntimeError(f"upload failed: {resp.status} {body}")
    return elapsed, body


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--client", choices=("sendfile", "curl"), default="sendfile",
                    help="a hand-written HTTP/1.1 PUT sending the body with sendfile(2), or curl -T")
    ap.add_argument("--dir", type=Path, default=ROOT / "data" / "bench-upload")
    args = ap.parse_args()
    size = int(args.size_gb * 1024**3)
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        src = work / "export.sqlite"
        make_file(src, size)
        data_dir = work / "data"
        env = {"GOODPUT_DATA_DIR": str(data_dir), "GOODPUT_SECRET_KEY": "bench",
               "GOODPUT_BROKER_URL": "redis://127.0.0.1:6379/14", "GOODPUT_DATABASE_URL": ""}
        os.environ.update(env)
        from app.db import engine_for, make_sessionmaker, upgrade
        from app.services.accounts.tokens import create_token
        from app.settings import Settings

        settings = Settings.from_env()
        upgrade(settings.resolved_database_url)
        engine = engine_for(settings)
        with make_sessionmaker(engine)() as session:
            token = create_token(session, "bench", "write").token
        engine.dispose()

        results: dict[str, list[tuple[float, float]]] = {"copy": [], "user": [], "upload": []}  # (s, CPU s)
        loads: list[float] = []
        server_cpus: list[float] = []
        with gunicorn(env) as server:  # as `goodput serve` runs it
            url = server.url
            import requests

            def copy(i: int, fn) -> tuple[float, float]:
                dst = work / f"copy{i}.bin"
                cpu = _cpu()
                elapsed = fn(src, dst)
                dst.unlink()
                return elapsed, _cpu() - cpu

            def upload(i: int) -> tuple[float, float]:
                run_id = requests.post(f"{url}/api/v1/runs", json={"job": "bench"},
                                       headers={"Authorization": f"Bearer {token}"}).json()["id"]
                cpu, server_cpu = _cpu(), server.cpu_seconds()
                elapsed, body = timed_upload(url, token, run_id, src, args.client)
                cpu, server_cpu = _cpu() - cpu, server.cpu_seconds() - server_cpu
                server_cpus.append(server_cpu)
                stored = data_dir / "uploads" / body["sha256"][:2] / body["sha256"]
                assert stored.stat().st_size == size == body["size_bytes"]
                if i == 0:
                    h = hashlib.sha256()
                    with src.open("rb") as fh:
                        while chunk := fh.read(BLOCK):
                            h.update(chunk)
                    assert h.hexdigest() == body["sha256"], "sha256 mismatch"
                stored.unlink()
                return elapsed, cpu + server_cpu  # the client's CPU counts: a copy's reading side does too

            steps = {"copy": lambda i: copy(i, timed_copy), "user": lambda i: copy(i, timed_user_copy),
                     "upload": upload}
            order = list(steps)
            for i in range(args.repeat):
                for name in order[i % 3:] + order[: i % 3]:  # rotated: no step always runs first or last
                    drop_cache_hint(src)  # every step reads the source from disk, none from page cache
                    results[name].append(steps[name](i))
                loads.append(os.getloadavg()[0])
        import redis

        redis.Redis.from_url("redis://127.0.0.1:6379/14").delete("ingest", "light")
        gib = size / 1024**3
        med = {k: statistics.median(t for t, _ in v) for k, v in results.items()}
        cpu = {k: statistics.median(c for _, c in v) for k, v in results.items()}
        print(f"file: {gib:.2f} GiB on {args.dir}; {args.repeat} interleaved rounds; 1-min load average after each "
              f"round: {', '.join(f'{x:.1f}' for x in loads)} on {os.cpu_count()} CPUs")
        labels = {"copy": "plain copy (cp: copyfile + fsync)", "user": "user-space copy (1 MiB read/write + fsync)",
                  "upload": f"API upload (PUT via {args.client}; CPU = client + gunicorn)"}
        for k, label in labels.items():
            print(f"{label}: median {med[k]:.2f} s = {gib / med[k]:.2f} GiB/s, CPU {cpu[k]:.2f} s  (runs: "
                  + ", ".join(f"{t:.2f}" for t, _ in results[k]) + ")")
        print(f"  of which gunicorn (receive, SHA-256, write, fsync, DB row): median "
              f"{statistics.median(server_cpus):.2f} s CPU = {statistics.median(server_cpus) / gib:.2f} s/GiB")
        print(f"upload / copy throughput: {med['copy'] / med['upload']:.2f} (target >= 0.5); "
              f"upload / user-space copy: {med['user'] / med['upload']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
