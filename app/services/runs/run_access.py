"""Who may change a run: re-analyse it, add reports to it, retry it. The same people who may delete it (its
submitter, the service token that uploaded it, an admin); everyone with read access may look at it."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.errors import ApiError
from app.services.jobs.runs import get_run, may_delete


def require_change(session: Session, run_id: int, principal, action: str) -> None:
    """Raise ApiError RUN_NOT_FOUND (404) or FORBIDDEN (403) unless ``principal`` (an ``app.auth.Principal``)
    may change run ``run_id``; ``action`` names the change in the message ("re-analyse")."""
    run = get_run(session, run_id)
    if principal is None or not may_delete(run, user_id=principal.user_id, token_id=principal.token_id,
                                           is_admin=principal.is_admin):
        raise ApiError("FORBIDDEN", f"Run {run_id} was submitted by someone else; only they or an admin can "
                       f"{action} it.", {"run_id": run_id})
