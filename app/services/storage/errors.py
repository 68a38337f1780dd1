"""Typed errors of the storage layer. They carry the API's error codes; the API and web layer (app.errors) map
them to HTTP responses, so storage never raises HTTP errors itself."""

from __future__ import annotations

from app.errors import CodedError


class StorageError(CodedError):
    """A storage problem a client can act on: a stable code (one of app.errors.ERROR_STATUS), a message."""


class StorageFull(StorageError):
    """The data directory (or object store) has no room for the upload."""

    code = "NO_SPACE"


class UploadTooLarge(StorageError):
    """The upload exceeds GOODPUT_MAX_UPLOAD_BYTES (after decompression)."""

    code = "TOO_LARGE"


class BadUpload(StorageError):
    """The upload's bytes cannot be received: damaged or truncated compression (BAD_COMPRESSION), or a body
    shorter than its Content-Length (BAD_REQUEST)."""

    code = "BAD_COMPRESSION"
