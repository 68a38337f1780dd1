"""Thin views of /api/v1: parse the request, call a service, return JSON. Query parameters arrive parsed, as
keyword arguments, from the route table (``app.api.routes.Route.params``)."""

from __future__ import annotations

from flask import jsonify, request, url_for

from app.api.params import parse_tags
from app.api.request import GoodputRequest, socket_body
from app.auth import current_principal, require_principal
from app.db import get_session
from app.errors import ApiError
from app.models import RunStatus
from app.services.accounts import tokens as tokens_service
from app.services.jobs import operations
from app.services.jobs import runs as runs_service
from app.services.pages import compare as compare_service
from app.services.reads import findings as findings_service
from app.services.reads import health as health_service
from app.services.reads import jobs as jobs_service
from app.services.reads import rules as rules_service
from app.services.reads.reports import report_to_dict
from app.services.reads.run_query import RunFilter
from app.services.runs import run_access, uploads
from app.services.runs.window_fit import check_window_fits
from app.services.storage import CHUNK, UploadSink, storage_for
from app.settings import current_settings


def health():
    body = health_service.check(get_session(), current_settings())
    return jsonify(body), (200 if body["status"] == "ok" else 503)


def _meta_from_request() -> uploads.RunMeta:
    principal = current_principal()
    default_source = "web" if principal is not None and principal.kind == "user" else "api"
    if request.mimetype == "multipart/form-data":
        form = request.form
        if "files" in form:
            # A file part that lost its filename: a CR or LF in the name broke the part's headers. Taking
            # it as a text field would accept the upload and drop the file.
            raise ApiError("VALIDATION_ERROR", "Each 'files' part must be a file with a file name (without "
                           "control characters).", {"fields": {"files": "a file part with a file name"}})
        return uploads.parse_meta(form.get("job"), form.getlist("tag"), form.get("git_sha"),
                                  form.get("cluster"), form.get("source") or default_source, form.get("window"),
                                  form.getlist("threshold"))
    if request.mimetype == "application/json":
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            raise ApiError("VALIDATION_ERROR", "The JSON body must be an object.")
        tags = body.get("tags") or []
        if isinstance(tags, dict):
            tags = [f"{k}={v}" for k, v in tags.items()]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ApiError("VALIDATION_ERROR", "tags must be a list of key=value strings.")
        thresholds = body.get("thresholds")
        if thresholds is not None and not (
                isinstance(thresholds, dict)
                or (isinstance(thresholds, list) and all(isinstance(t, str) for t in thresholds))):
            raise ApiError("VALIDATION_ERROR", "thresholds must be a list of RULE.name=NUMBER strings or an object.",
                           {"fields": {"thresholds": uploads.THRESHOLD_HELP}})
        fields = {k: body.get(k) for k in ("job", "git_sha", "cluster", "source", "window")}
        if any(v is not None and not isinstance(v, str) for v in fields.values()):
            raise ApiError("VALIDATION_ERROR", "job, git_sha, cluster, source and window must be strings.")
        return uploads.parse_meta(fields["job"], tags, fields["git_sha"], fields["cluster"],
                                  fields["source"] or default_source, fields["window"], thresholds)
    if request.content_length:
        raise ApiError("UNSUPPORTED_MEDIA_TYPE", "Send multipart/form-data (files + fields) or JSON metadata.")
    return uploads.parse_meta(None, [], None, None, default_source)


def create_run():
    principal = require_principal()
    submitter = uploads.Submitter(principal.name, principal.user_id, principal.token_id)
    session = get_session()
    # A retry of an upload whose response was lost (the server died after the commit): the run it created,
    # answered before its body is read again.
    key = uploads.idempotency_digest(request.headers.get("Idempotency-Key"), submitter)
    earlier = uploads.run_for_key(session, key)
    if earlier is not None:
        while request.stream.read(CHUNK):  # read (and drop) the body: a client still sending it gets the answer
            pass
        return jsonify(runs_service.run_detail(session, earlier.id)), 200, {
            "Location": url_for("api_v1.get_run", run_id=earlier.id), "Idempotent-Replayed": "true"}
    meta = _meta_from_request()
    req: GoodputRequest = request  # type: ignore[assignment]
    files = []
    for name, fs in req.files.items(multi=True):
        stream = fs.stream
        if not isinstance(stream, UploadSink):  # GoodputRequest streams every part into a sink
            raise TypeError(f"a multipart part arrived as {type(stream).__name__}, not through the upload sink")
        staged = stream.finish()
        if not fs.filename and staged.size_bytes == 0:
            continue  # a browser's file input left empty, not an empty file
        files.append(uploads.Incoming(fs.filename or name, staged))
    run, _reports = uploads.create_run(session, current_settings(), meta, files, submitter, idempotency_key=key)
    body = runs_service.run_detail(session, run.id)
    return jsonify(body), 202, {"Location": url_for("api_v1.get_run", run_id=run.id)}


def put_report(run_id: int, name: str):
    settings = current_settings()
    session = get_session()
    # 404 or 403 before reading a large body
    run_access.require_change(session, run_id, current_principal(), "add reports to")
    # A body far above the cap cannot decompress to less (gzip/zstd framing adds well under 1 %).
    if (request.content_length or 0) > settings.max_upload_bytes * 1.01 + 65536:
        raise ApiError("TOO_LARGE", f"{name}: {request.content_length} bytes exceeds the limit of "
                       f"{settings.max_upload_bytes} bytes", {"limit_bytes": settings.max_upload_bytes})
    sink = storage_for(settings).open_sink(settings.max_upload_bytes, name)
    try:
        fast = socket_body(request.environ) if request.content_length is not None else None
        if fast is not None:
            sink.receive(fast.readinto, fast.length)
        else:
            for chunk in _body_chunks():
                sink.write(chunk)
        staged = sink.finish()
        report, created = uploads.add_report(session, settings, run_id, uploads.Incoming(name, staged))
    finally:
        sink.discard()  # a no-op once the file moved into uploads/
    return jsonify(report_to_dict(report)), (202 if created else 200), {
        "Location": url_for("api_v1.get_run", run_id=run_id)}


def _body_chunks():
    """The request body in CHUNK pieces. With a Content-Length we read the WSGI input directly: Werkzeug's
    LimitedStream copies every chunk twice more, which costs a third of the upload throughput."""
    length = request.content_length
    if length is None:  # chunked transfer: Werkzeug knows when the body ends
        while chunk := request.stream.read(CHUNK):
            yield chunk
        return
    raw = request.environ["wsgi.input"]
    while length > 0:
        chunk = raw.read(min(CHUNK, length))
        if not chunk:
            raise ApiError("BAD_REQUEST", "The request body ended before its Content-Length.")
        length -= len(chunk)
        yield chunk


def list_runs(job, tag, status, submitter, created_after, created_before, sort, page, page_size):
    filters = RunFilter(job=job, tags=parse_tags(tag), status=status, submitter=submitter,
                        created_after=created_after, created_before=created_before)
    return jsonify(runs_service.list_runs(get_session(), filters, sort=sort, page=page, page_size=page_size))


def get_run(run_id: int):
    return jsonify(runs_service.run_detail(get_session(), run_id))


def delete_run(run_id: int):
    p = require_principal()
    runs_service.delete_run(get_session(), current_settings(), run_id, user_id=p.user_id, token_id=p.token_id,
                            is_admin=p.is_admin)
    return jsonify({"id": run_id, "status": RunStatus.DELETED}), 202


def list_tokens():
    session = get_session()
    rows = tokens_service.list_tokens(session, require_principal().actor())
    owners = tokens_service.owner_names(session, rows)
    return jsonify({"items": [tokens_service.token_to_dict(r, owners.get(r.user_id)) for r in rows]})


def revoke_token(token_id: int):
    session = get_session()
    try:
        row = tokens_service.revoke_token(session, token_id, require_principal().actor())
    except tokens_service.TokenForbidden as exc:
        raise ApiError("FORBIDDEN", str(exc).capitalize() + ".", {"token_id": token_id}) from None
    except tokens_service.TokenError:
        raise ApiError("TOKEN_NOT_FOUND", f"Token {token_id} does not exist.", {"token_id": token_id}) from None
    owners = tokens_service.owner_names(session, [row])
    return jsonify(tokens_service.token_to_dict(row, owners.get(row.user_id)))


def retry_run(run_id: int):
    session = get_session()
    run_access.require_change(session, run_id, current_principal(), "retry")
    operations.retry_run(session, current_settings(), run_id)
    return jsonify(runs_service.run_detail(session, run_id)), 202, {
        "Location": url_for("api_v1.get_run", run_id=run_id)}


def reanalyze_run(run_id: int):
    body = request.get_json(silent=True) if request.mimetype == "application/json" else None
    if not isinstance(body, dict) or not isinstance(body.get("window"), str):
        raise ApiError("VALIDATION_ERROR", 'The JSON body must be {"window": "<spec>"}, e.g. {"window": "steady"}.')
    session = get_session()
    run_access.require_change(session, run_id, current_principal(), "re-analyse")
    check_window_fits(session, current_settings(), run_id, body["window"])
    runs_service.reanalyze(session, current_settings(), run_id, body["window"])
    return jsonify(runs_service.run_detail(session, run_id)), 202, {
        "Location": url_for("api_v1.get_run", run_id=run_id)}


def list_findings(run_id: int, **query):
    return jsonify(findings_service.list_findings(get_session(), run_id, **query))


def run_summary(run_id: int):
    return jsonify(runs_service.run_summary(get_session(), run_id))


def list_jobs(**query):
    return jsonify(jobs_service.list_jobs(get_session(), **query))


def job_history(name: str, **query):
    return jsonify(jobs_service.job_history(get_session(), name, **query))


def compare(base: int, head: int, noise_pct: float):
    return jsonify(compare_service.compare_runs(get_session(), current_settings(), base, head,
                                                noise_pct=noise_pct, with_views=False).to_api())


def list_rules():
    return jsonify({"items": rules_service.catalogue()})
