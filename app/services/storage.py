"""Files under data_dir: streaming uploads into staging (hash, decompress, cap), content-addressed uploads,
per-report DuckDB paths. Every path is built from server-generated ids or hashes, never client names."""

from __future__ import annotations

import hashlib
import os
import queue
import re
import threading
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import zstandard

from analysis.errors import TraceError
from app.errors import ApiError

CHUNK = 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# Only these suffixes survive from a client's file name: detect_kind reads them to name binary reports.
KNOWN_SUFFIXES = (".sqlite", ".csv", ".nsys-rep", ".qdrep", ".ncu-rep")


def safe_suffix(filename: str) -> str:
    name = filename.lower()
    for ext in (".gz", ".zst", ".zstd"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    return next((s for s in KNOWN_SUFFIXES if name.endswith(s)), "")


@dataclass(frozen=True)
class Staged:
    """A fully received upload in staging: decompressed bytes, their SHA-256 and size."""

    path: Path
    sha256: str
    size_bytes: int


class _Writer:
    """Writes chunks on a background thread: the request thread receives and hashes the next chunk while
    this one is copied to the page cache (both release the GIL). At most ``depth`` chunks wait."""

    def __init__(self, path: Path, depth: int = 8) -> None:
        self._fh = open(path, "xb")  # closed by close()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="upload-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._fh.write(chunk)
                except BaseException as exc:  # re-raised in the request thread
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            if isinstance(exc, OSError) and exc.errno == 28:
                raise ApiError("NO_SPACE", "The server is out of disk space for uploads.") from None
            raise exc

    def write(self, data: bytes) -> None:
        self._raise()
        self._queue.put(data)

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def finish(self) -> None:
        """Wait for every chunk, fsync (durable before a committed row points at it), close."""
        self._stop()
        self._raise()
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()

    def close(self) -> None:
        self._stop()
        if not self._fh.closed:
            self._fh.close()

    @property
    def closed(self) -> bool:
        return self._fh.closed


class UploadSink:
    """A write-only file that decompresses gzip/zstd (sniffed from content), hashes and caps on the way in.

    Werkzeug writes multipart file parts into it; the PUT endpoint copies ``request.stream`` into it.
    ``seek(0)`` (what Werkzeug calls at the end of a part) or ``finish()`` completes it.
    """

    def __init__(self, path: Path, max_bytes: int, label: str = "upload") -> None:
        self.path = path
        self.label = label  # the client's file name, only for messages
        self.max_bytes = max_bytes
        self._fh = _Writer(path)
        self._sha = hashlib.sha256()
        self._size = 0
        self._raw = 0
        self._head = b""
        self._mode: str | None = None
        self._gz: zlib._Decompress | None = None
        self._zw = None
        self._staged: Staged | None = None

    # -- the file protocol Werkzeug uses -------------------------------------------------------
    def write(self, data: bytes) -> int:
        n = len(data)
        self._raw += n
        if self._raw > self.max_bytes and self._mode in (None, "plain"):
            self._too_large()
        if self._mode is None:
            self._head += data
            if len(self._head) < len(ZSTD_MAGIC):
                return n
            data, self._head = self._head, b""
            self._start(data)
        self._feed(data)
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        if offset == 0 and whence == 0:
            self.finish()
        return 0

    def tell(self) -> int:
        return self._raw

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    @property
    def closed(self) -> bool:
        return self._fh.closed

    # -- decoding ---------------------------------------------------------------------------------
    def _start(self, head: bytes) -> None:
        if head.startswith(GZIP_MAGIC):
            self._mode, self._gz = "gzip", zlib.decompressobj(wbits=31)
        elif head.startswith(ZSTD_MAGIC):
            self._mode = "zstd"
            self._zw = zstandard.ZstdDecompressor().stream_writer(_Out(self), write_size=CHUNK, closefd=False)
        else:
            self._mode = "plain"

    def _feed(self, data: bytes) -> None:
        try:
            if self._mode == "plain":
                self._out(data)
            elif self._mode == "gzip":
                self._feed_gzip(data)
            elif data:
                self._zw.write(data)
        except (zlib.error, zstandard.ZstdError) as exc:
            raise ApiError("BAD_COMPRESSION", f"{self.label}: the compressed upload is damaged: {exc}") from None

    def _feed_gzip(self, data: bytes) -> None:
        # max_length bounds memory: a small compressed chunk may expand a thousandfold.
        pending = False
        while True:
            if self._gz.eof:  # concatenated gzip members
                data = self._gz.unused_data + data
                if not data.strip(b"\x00"):
                    return
                self._gz = zlib.decompressobj(wbits=31)
            if not (data or self._gz.unconsumed_tail or pending):
                return
            out = self._gz.decompress(self._gz.unconsumed_tail + data, CHUNK)
            data = b""
            self._out(out)
            pending = len(out) == CHUNK

    def _out(self, data: bytes) -> None:
        if not data:
            return
        self._size += len(data)
        if self._size > self.max_bytes:
            self._too_large()
        self._sha.update(data)
        self._fh.write(data)

    def _too_large(self) -> None:
        raise TraceError("too_large", f"{self.label}: the upload exceeds the limit of {self.max_bytes} bytes"
                         + (" (after decompression)" if self._mode in ("gzip", "zstd") else ""))

    def finish(self) -> Staged:
        """Flush the decoder and close the file; returns the Staged file (idempotent)."""
        if self._staged is not None:
            return self._staged
        if self._mode is None:
            data, self._head = self._head, b""
            self._start(data)
            self._feed(data)
        try:
            if self._mode == "gzip":
                self._feed_gzip(b"")
                if not self._gz.eof and self._raw > 0:
                    raise ApiError("BAD_COMPRESSION", f"{self.label}: the gzip upload is truncated.")
            elif self._mode == "zstd":
                self._zw.flush()
        except (zlib.error, zstandard.ZstdError) as exc:
            raise ApiError("BAD_COMPRESSION", f"{self.label}: the compressed upload is damaged: {exc}") from None
        self._fh.finish()
        self._staged = Staged(self.path, self._sha.hexdigest(), self._size)
        return self._staged

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class _Out:
    """The zstd stream writer's destination: our hashing, capping writer."""

    def __init__(self, sink: UploadSink) -> None:
        self._sink = sink

    def write(self, data: bytes) -> int:
        self._sink._out(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


class Storage:
    """The layout under data_dir: staging/, uploads/<sha[:2]>/<sha>, reports/<id>/trace.duckdb."""

    def __init__(self, data_dir: Path | str) -> None:
        self.root = Path(data_dir)
        self.staging = self.root / "staging"
        self.uploads = self.root / "uploads"
        self.reports = self.root / "reports"

    def open_sink(self, max_bytes: int, filename: str = "") -> UploadSink:
        self.staging.mkdir(parents=True, exist_ok=True)
        label = re.split(r"[\\/]", filename)[-1][:200] or "upload"
        return UploadSink(self.staging / f"{uuid.uuid4().hex}{safe_suffix(filename)}", max_bytes, label)

    def store(self, staged: Staged) -> str:
        """Move a staged file to its content address; returns the path relative to data_dir."""
        rel = Path("uploads") / staged.sha256[:2] / staged.sha256
        dest = self.root / rel
        if dest.exists():
            staged.path.unlink(missing_ok=True)  # same bytes already stored
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged.path, dest)
        return rel.as_posix()

    def path(self, rel: str) -> Path:
        return self.root / rel

    def report_dir(self, report_id: int) -> Path:
        return self.reports / str(int(report_id))

    def trace_path(self, report_id: int) -> Path:
        return self.report_dir(report_id) / "trace.duckdb"
