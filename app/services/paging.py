"""Pagination of list queries: ``{"items", "page", "page_size", "total"}``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50


def paginate(session: Session, query: sa.Select, page: int, page_size: int,
             to_dict: Callable[[Any], dict[str, Any]], *, scalars: bool = True) -> dict[str, Any]:
    """Run ``query`` for one page and count all its rows."""
    total = session.scalar(sa.select(sa.func.count()).select_from(query.order_by(None).subquery())) or 0
    paged = query.limit(page_size).offset((page - 1) * page_size)
    rows = session.scalars(paged) if scalars else session.execute(paged)
    return {"items": [to_dict(r) for r in rows], "page": page, "page_size": page_size, "total": int(total)}
