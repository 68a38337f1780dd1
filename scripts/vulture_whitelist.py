"""Code that is used although nothing in the packages calls it by name, for the unused-code check (vulture,
``make lint``): each entry is called by a framework, by a protocol or from a configuration string.

Flask routes, error handlers and template globals and Celery tasks are not listed: their decorators mark them
(``ignore_decorators`` in pyproject's ``[tool.vulture]``). A test imports this module, so an entry whose code
was renamed or removed fails there instead of whitelisting nothing.
"""

from __future__ import annotations

from app import create_app
from app.api.request import GoodputRequest
from app.ids import IdConverter
from app.models.base import UTCDateTime
from app.models.status import StatusText
from app.services.storage.sink import UploadSink
from goodput_cli.web_worker import HeadFirstWorker, _GuardedInput

ENTRY_POINTS = (
    create_app,                                   # gunicorn's "app:create_app()" (goodput_cli.service, compose)
    HeadFirstWorker,                              # gunicorn's --worker-class, a dotted path
    HeadFirstWorker.on_client_socket_readable,    # gunicorn's ThreadWorker calls it on a readable socket
    GoodputRequest.make_form_data_parser,         # Werkzeug's Request builds its form parser with it
    IdConverter.to_python,                        # Werkzeug's URL converter protocol
    UTCDateTime.process_bind_param,               # SQLAlchemy's TypeDecorator hooks
    UTCDateTime.process_result_value,
    StatusText.process_bind_param,
    StatusText.process_result_value,
    UploadSink.seek,                              # the file-like protocol (werkzeug writes an upload through it)
    UploadSink.writable,
    UploadSink.readable,
    _GuardedInput.readlines,                      # the WSGI input stream's protocol (PEP 3333)
)
