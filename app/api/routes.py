"""The route table of /api/v1: one row per operation, read by the blueprint and the OpenAPI generator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.api import views
from app.auth import require_scope


@dataclass(frozen=True)
class Route:
    path: str                       # Flask rule under /api/v1
    methods: tuple[str, ...]
    view: Callable[..., Any]
    scope: str | None               # None: public
    summary: str
    response: str                   # schema name of the success body
    status: int = 200
    params: tuple[str, ...] = ()    # query parameter names (see schemas.PARAMS)
    body: str | None = None         # request body kind: 'multipart' | 'binary'
    errors: tuple[int, ...] = ()
    tags: tuple[str, ...] = field(default=("runs",))

    @property
    def endpoint(self) -> str:
        return self.view.__name__

    def wrapped(self) -> Callable[..., Any]:
        return require_scope(self.scope)(self.view) if self.scope else self.view


ROUTES: tuple[Route, ...] = (
    Route("/health", ("GET",), views.health, None, "Reachability of the metadata DB and the broker",
          "Health", tags=("service",), errors=(503,)),
)
