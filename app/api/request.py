"""The request class: multipart file parts spool to ``data_dir/staging`` through the upload sink."""

from __future__ import annotations

from typing import IO

from flask import Request

from app.settings import current_settings


class GoodputRequest(Request):
    # Form fields (not files) above this are refused: metadata is small.
    max_form_memory_size = 1024 * 1024

    def _get_file_stream(
        self, total_content_length: int | None, content_type: str | None,
        filename: str | None = None, content_length: int | None = None,
    ) -> IO[bytes]:
        # Werkzeug would spool to the system temp dir; ours hashes, decompresses and caps on the way in.
        from app.services.storage import Storage

        settings = current_settings()
        sink = Storage(settings.data_dir).open_sink(settings.max_upload_bytes, filename or "")
        self.__dict__.setdefault("_upload_sinks", []).append(sink)
        return sink

    def upload_sinks(self) -> list:
        """The file parts received so far (parse the form first)."""
        return list(self.__dict__.get("_upload_sinks", []))

    def close(self) -> None:
        # Staged parts a service did not move into uploads/ are removed: nothing stored on error.
        try:
            super().close()
        finally:
            for sink in self.__dict__.pop("_upload_sinks", []):
                sink.discard()
