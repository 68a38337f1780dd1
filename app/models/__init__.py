"""The SQLAlchemy ORM of the metadata DB; Alembic (``migrations/``) is the only way its schema changes."""

from app.models.base import Base, utcnow
from app.models.finding import Finding, RunSummary
from app.models.job import ANALYSIS_STATUSES, RUN_SOURCES, RUN_STATUSES, Job, Run
from app.models.report import REPORT_KINDS, REPORT_STATUSES, Report
from app.models.status import AnalysisStatus, ReportStatus, RunStatus
from app.models.user import SCOPES, ApiToken, SignInFailure, User, UserSession

__all__ = [
    "ANALYSIS_STATUSES", "REPORT_KINDS", "REPORT_STATUSES", "RUN_SOURCES", "RUN_STATUSES", "SCOPES",
    "AnalysisStatus", "ApiToken", "Base", "Finding", "Job", "Report", "ReportStatus", "Run", "RunStatus",
    "RunSummary", "SignInFailure", "User", "UserSession", "utcnow",
]
