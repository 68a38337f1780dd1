"""Receiving an upload into a staged file: streamed, decompressed (gzip/zstd sniffed from content), hashed and
capped on the way in."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
import queue
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import zstandard

from app.services.storage.errors import BadUpload, StorageFull, UploadTooLarge

# 1 MiB: measured faster than 4 MiB (server CPU 1.0-1.5 vs 1.9-2.7 s/GiB): a chunk still fits the
# per-core L2 cache when it is hashed and written right after being received.
CHUNK = 1024 * 1024
# Writeback of buffered writes is started every this many bytes written (see _Writer._write_all).
WRITEBACK_STEP = 32 * 1024 * 1024
# Chunks queued for hashing (plus those being hashed and written: DEPTH + 1 pooled buffers per upload).
DEPTH = 4
# O_DIRECT writes: offset and length multiples of this (the buffers are page-aligned mmaps).
DIRECT_ALIGN = 4096
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# A compressed upload may expand this many times its compressed size (once past the floor below): nsys SQLite
# exports compress 5-10x with zstd -19 (the corpus), ncu CSVs and NCCL logs a few dozen times; deflate cannot
# exceed about 1,032x at all. A zstd stream of zeros reaches 32,000x: 640 KB filled 20 GiB of disk.
MAX_EXPANSION = 250
EXPANSION_FLOOR_BYTES = 64 * 1024 * 1024
SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_HEADER_BYTES = 100
# Only these suffixes survive from a client's file name: detect_kind reads them to name binary reports
# (.log, .txt: NCCL debug logs, detected by their content like every text input).
KNOWN_SUFFIXES = (".sqlite", ".csv", ".nsys-rep", ".qdrep", ".ncu-rep", ".log", ".txt")


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
    suffix: str = ""  # the client name's known suffix (.sqlite, .nsys-rep ...): ingest reads the format from it


class _Writer:
    """Hashes and writes chunks on two background threads while the request thread receives the next one
    (recv, SHA-256 and write(2) all release the GIL): a pipeline receive -> hash -> write.

    Full chunks in pooled buffers (the socket path) are written with O_DIRECT: the disk reads them straight
    from the page-aligned buffer, so there is no copy into the page cache and no dirty pages to write back
    later (that copy cost more CPU than the receive; buffered writes with fsync are also ~3x slower than
    direct ones on our VM disk). The writer thread mostly waits for the disk while the hasher works. Other
    data (the decoders' output, a body's short last chunk, a filesystem without O_DIRECT) is written
    buffered, and writeback of it is started as it goes. ``finish()`` fsyncs either way.

    The digest is taken over exactly the buffers handed to write(2), in order. Reusable receive buffers
    come from ``buffer()`` and go back to the pool once written, so a large upload allocates nothing per
    chunk; memory stays bounded by the ``depth + 1`` pooled chunks.
    """

    def __init__(self, path: Path, depth: int = DEPTH) -> None:
        # A raw descriptor: a buffered file object would copy every chunk once more.
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        self.sha = hashlib.sha256()
        self._queue: queue.Queue[tuple[bytes | memoryview, mmap.mmap | None] | None] = queue.Queue(depth)
        self._written_q: queue.SimpleQueue[tuple[bytes | memoryview, mmap.mmap | None] | None] = queue.SimpleQueue()
        self._free: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()
        self._buffers = 0
        self._depth = depth
        self._error: BaseException | None = None
        self._written = 0
        self._kicked = 0
        self._direct = hasattr(os, "O_DIRECT")  # False once the filesystem refuses it
        self._direct_on = False
        self._hasher = threading.Thread(target=self._hash_run, name="upload-hasher", daemon=True)
        self._thread = threading.Thread(target=self._write_run, name="upload-writer", daemon=True)
        self._hasher.start()
        self._thread.start()

    def _hash_run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.sha.update(item[0])
                except BaseException as exc:  # re-raised in the request thread
                    self._error = exc
            self._written_q.put(item)
        self._written_q.put(None)

    def _write_run(self) -> None:
        while (item := self._written_q.get()) is not None:
            data, buf = item
            if self._error is None:
                try:
                    self._write_all(memoryview(data), buf is not None)
                except BaseException as exc:  # re-raised in the request thread
                    self._error = exc
            if buf is not None:
                self._free.put(buf)

    def _set_direct(self, on: bool) -> bool:
        """Switch O_DIRECT on or off for the next writes; False where the filesystem refuses it."""
        if on != self._direct_on:
            flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
            try:
                fcntl.fcntl(self._fd, fcntl.F_SETFL, (flags | os.O_DIRECT) if on else (flags & ~os.O_DIRECT))
            except OSError:
                if not on:
                    raise
                self._direct = False
                return False
            self._direct_on = on
        return on

    def _write_all(self, view: memoryview, aligned: bool) -> None:
        n = len(view)
        # O_DIRECT needs the buffer, the file offset and the length aligned (4 KiB covers every block size).
        if (self._direct and aligned and self._set_direct(n % DIRECT_ALIGN == 0 and self._written % DIRECT_ALIGN == 0)):
            try:
                done = os.write(self._fd, view)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._direct = False  # e.g. a filesystem that takes the flag but not the write: buffered
                done = 0
            view = view[done:]
            if view:
                self._set_direct(False)
        elif self._direct_on:
            self._set_direct(False)
        while view:
            view = view[os.write(self._fd, view):]
        self._written += n
        if self._written - self._kicked >= WRITEBACK_STEP and hasattr(os, "posix_fadvise"):
            # Start writing back what was just written (POSIX_FADV_DONTNEED starts asynchronous writeback
            # of the dirty pages; it drops only pages already clean): the disk then works while we
            # receive, and the final fsync waits for the last few MiB instead of the whole file.
            os.posix_fadvise(self._fd, self._kicked, self._written - self._kicked, os.POSIX_FADV_DONTNEED)
            self._kicked = self._written

    def _raise(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise StorageFull("The server is out of disk space for uploads.") from None
            raise exc

    def buffer(self) -> mmap.mmap:
        """A CHUNK-sized, page-aligned receive buffer: a new one until ``depth + 1`` exist, then a written one."""
        self._raise()
        try:
            return self._free.get_nowait()
        except queue.Empty:
            if self._buffers <= self._depth:
                self._buffers += 1
                return mmap.mmap(-1, CHUNK)
        while True:  # the writer is behind: wait for it (or for its error)
            try:
                return self._free.get(timeout=0.5)
            except queue.Empty:
                self._raise()
                if not (self._thread.is_alive() and self._hasher.is_alive()):
                    raise RuntimeError("the upload writer stopped") from None

    def write(self, data: bytes | memoryview, buf: mmap.mmap | None = None) -> None:
        """Queue ``data`` (a view of ``buf`` when it came from ``buffer()``, which is then recycled)."""
        self._raise()
        self._queue.put((data, buf))

    def recycle(self, buf: mmap.mmap) -> None:
        self._free.put(buf)

    def _stop(self) -> None:
        if self._hasher.is_alive():
            self._queue.put(None)
            self._hasher.join()
        self._thread.join()

    def finish(self) -> str:
        """Wait for every chunk, fsync (durable before a committed row points at it), close; the digest."""
        self._stop()
        self._raise()
        os.fsync(self._fd)
        self.close()
        return self.sha.hexdigest()

    def close(self) -> None:
        self._stop()
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd < 0


class UploadSink:
    """A write-only file that decompresses gzip/zstd (sniffed from content), hashes and caps on the way in.

    Werkzeug writes multipart file parts into it; the PUT endpoint fills it with ``receive()`` from the
    client socket (gunicorn, Content-Length) or writes ``request.stream`` chunks into it.
    ``seek(0)`` (what Werkzeug calls at the end of a part) or ``finish()`` completes it.
    """

    def __init__(self, path: Path, max_bytes: int, label: str = "upload", suffix: str = "") -> None:
        self.path = path
        self.suffix = suffix
        self.label = label  # the client's file name, only for messages
        self.max_bytes = max_bytes
        self._fh = _Writer(path)
        # Held from creation until the request is done with the file (moved into uploads/ or discarded):
        # reconcile removes a staged file only when nobody holds it, i.e. its receiving process was killed
        # (Storage.remove_abandoned_staging). A multipart request finishes its first file long before the last.
        self._lock_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._size = 0
        self._raw = 0
        self._head = b""
        self._mode: str | None = None
        self._gz: zlib._Decompress | None = None
        self._zw: zstandard.ZstdDecompressionWriter | None = None
        self._staged: Staged | None = None
        # Decompressed bytes allowed in all: the SQLite header's own file size, when it states one.
        self._declared: int | None = None
        self._first = b""  # the first decompressed bytes, until the SQLite header can be read

    # -- the file protocol Werkzeug uses -------------------------------------------------------
    def write(self, data: bytes) -> int:
        if not isinstance(data, bytes):  # queued for the writer thread: must not change under it
            data = bytes(data)
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

    def receive(self, readinto: Callable[[memoryview], int], length: int) -> None:
        """Take exactly ``length`` body bytes from ``readinto`` (``socket.recv_into``-like) into pooled
        buffers: an uncompressed body goes to the writer thread without any copy in Python."""
        while length > 0:
            buf = self._fh.buffer()
            view = memoryview(buf)
            want, got = min(CHUNK, length), 0
            while got < want:
                n = readinto(view[got:want])
                if not n:
                    raise BadUpload("The request body ended before its Content-Length.", code="BAD_REQUEST")
                got += n
            length -= got
            if self._mode == "plain":
                self._raw += got
                if self._raw > self.max_bytes:
                    self._too_large()
                self._size += got
                self._fh.write(view[:got], buf)
            else:  # the sniffing head or a compressed body: the decoder copies anyway
                self.write(bytes(view[:got]))
                self._fh.recycle(buf)

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
            # The writer only calls write() and flush(), which _Out has.
            self._zw = zstandard.ZstdDecompressor().stream_writer(cast("IO[bytes]", _Out(self)), write_size=CHUNK,
                                                                 closefd=False)
        else:
            self._mode = "plain"

    def _feed(self, data: bytes) -> None:
        try:
            if self._mode == "plain":
                self._out(data)
            elif self._mode == "gzip":
                self._feed_gzip(data)
            elif data:
                self._zstd().write(data)
        except (zlib.error, zstandard.ZstdError) as exc:
            raise BadUpload(f"{self.label}: the compressed upload is damaged: {exc}") from None

    def _feed_gzip(self, data: bytes) -> None:
        # max_length bounds memory: a small compressed chunk may expand a thousandfold.
        pending = False
        gz = self._gzip()
        while True:
            if gz.eof:  # concatenated gzip members
                data = gz.unused_data + data
                if not data.strip(b"\x00"):
                    return
                gz = self._gz = zlib.decompressobj(wbits=31)
            if not (data or gz.unconsumed_tail or pending):
                return
            out = gz.decompress(gz.unconsumed_tail + data, CHUNK)
            data = b""
            self._out(out)
            pending = len(out) == CHUNK

    def _gzip(self) -> zlib._Decompress:
        if self._gz is None:
            raise RuntimeError("gzip decoding has not started")
        return self._gz

    def _zstd(self) -> zstandard.ZstdDecompressionWriter:
        if self._zw is None:
            raise RuntimeError("zstd decoding has not started")
        return self._zw

    def _out(self, data: bytes) -> None:
        if not data:
            return
        self._size += len(data)
        if self._size > self.max_bytes:
            self._too_large()
        if self._mode in ("gzip", "zstd"):
            self._check_expansion(data)
        self._fh.write(data)  # hashed there: the digest covers exactly the stored bytes

    def _check_expansion(self, data: bytes) -> None:
        """Refuse a decompression bomb while it is small: past ``EXPANSION_FLOOR_BYTES``, at most
        ``MAX_EXPANSION`` times the compressed bytes; a SQLite file's first 100 bytes must be a sane header,
        and the file no longer than the size that header states."""
        if len(self._first) < SQLITE_HEADER_BYTES:
            self._first += data[:SQLITE_HEADER_BYTES - len(self._first)]
            if len(self._first) >= SQLITE_HEADER_BYTES or not SQLITE_MAGIC.startswith(self._first[:16]):
                self._declared = _sqlite_size(self._first, self.label)
        if self._declared is not None and self._size > self._declared:
            raise BadUpload(f"{self.label}: the decompressed SQLite file is longer than its header says "
                            f"({self._declared} bytes); the upload is damaged or forged.")
        if self._size > EXPANSION_FLOOR_BYTES and self._size > MAX_EXPANSION * max(1, self._raw):
            raise BadUpload(f"{self.label}: the upload expands more than {MAX_EXPANSION} times its compressed "
                            "size, which no real export does; upload it uncompressed if it is genuine.")

    def _too_large(self) -> None:
        raise UploadTooLarge(f"{self.label}: the upload exceeds the limit of {self.max_bytes} bytes"
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
                if not self._gzip().eof and self._raw > 0:
                    raise BadUpload(f"{self.label}: the gzip upload is truncated.")
            elif self._mode == "zstd":
                self._zstd().flush()
        except (zlib.error, zstandard.ZstdError) as exc:
            raise BadUpload(f"{self.label}: the compressed upload is damaged: {exc}") from None
        self._staged = Staged(self.path, self._fh.finish(), self._size, self.suffix)
        return self._staged

    def discard(self) -> None:
        """Remove the staged file unless a service moved it into uploads/, and release its lock."""
        self.close()
        self.path.unlink(missing_ok=True)
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            os.close(fd)


def _sqlite_size(head: bytes, label: str) -> int | None:
    """The file size a SQLite header states (page size x page count), None when ``head`` is not SQLite or
    the count is not valid (an old writer); BadUpload when it starts as SQLite but its header is not one."""
    if not head.startswith(SQLITE_MAGIC):
        return None
    if len(head) < SQLITE_HEADER_BYTES:
        raise BadUpload(f"{label}: the decompressed file is shorter than a SQLite header.", code="NOT_SQLITE")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    sane = (512 <= page <= 65536 and page & (page - 1) == 0 and head[18] in (1, 2) and head[19] in (1, 2)
            and head[21:24] == b"\x40\x20\x20")
    if not sane:
        raise BadUpload(f"{label}: the decompressed file starts like SQLite but its header is not a SQLite "
                        "header; export it again.", code="NOT_SQLITE")
    pages = int.from_bytes(head[28:32], "big")
    # The stated count is valid only when the change counter equals version-valid-for (SQLite's file format).
    return page * pages if pages and head[24:28] == head[92:96] else None


class _Out:
    """The zstd stream writer's destination: our hashing, capping writer."""

    def __init__(self, sink: UploadSink) -> None:
        self._sink = sink

    def write(self, data: bytes) -> int:
        self._sink._out(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass
