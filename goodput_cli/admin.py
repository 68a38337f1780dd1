"""Administrative subcommands: `migrate`, `token create|list|revoke`, `user create|password|disable|enable`."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from goodput_cli.errors import UsageError

if TYPE_CHECKING:  # SQLAlchemy costs ~0.3 s to import; only the admin commands that run need it
    from sqlalchemy.orm import Session


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the admin subcommands."""
    p = sub.add_parser("migrate", help="apply the metadata DB migrations (GOODPUT_DATABASE_URL)")
    p.add_argument("--revision", default="head", help="target revision (default head)")
    p.set_defaults(func=cmd_migrate)

    token = sub.add_parser("token", help="API tokens for machines").add_subparsers(
        dest="token_command", required=True, metavar="ACTION")
    p = token.add_parser("create", help="create a token and print it (shown once)")
    p.add_argument("--name", required=True)
    p.add_argument("--scope", choices=("read", "write", "admin"), default="read")
    p.add_argument("--user", help="the person the token acts for (runs it uploads are theirs); "
                   "without it, a service token only admins manage")
    p.set_defaults(func=cmd_token_create)
    p = token.add_parser("list", help="list tokens (never their secrets)")
    p.set_defaults(func=cmd_token_list)
    p = token.add_parser("revoke", help="revoke a token by id")
    p.add_argument("id", type=int)
    p.set_defaults(func=cmd_token_revoke)

    user = sub.add_parser("user", help="people who log in to the web UI").add_subparsers(
        dest="user_command", required=True, metavar="ACTION")
    p = user.add_parser("create", help="create a user (password from a prompt or --password-stdin)")
    p.add_argument("username")
    p.add_argument("--admin", action="store_true", help="may manage tokens and other users' runs")
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    p.set_defaults(func=cmd_user_create)
    p = user.add_parser("password", help="set a user's password; ends all their web sessions")
    p.add_argument("username")
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    p.set_defaults(func=cmd_user_password)
    for action, text in (("disable", "refuse sign-in and the user's tokens; ends all their web sessions"),
                         ("enable", "allow a disabled user again")):
        p = user.add_parser(action, help=text)
        p.add_argument("username")
        p.set_defaults(func=cmd_user_set_active, active=action == "enable")


def _settings():
    from app.settings import Settings, SettingsError

    try:
        return Settings.from_env()
    except SettingsError as exc:
        raise UsageError(f"configuration: {exc}") from None


@contextmanager
def _session() -> Iterator[Session]:
    from app.db import NotMigrated, check_migrated, engine_for, make_sessionmaker, session_scope

    engine = engine_for(_settings())
    try:
        try:
            check_migrated(engine)
        except NotMigrated as exc:
            raise UsageError(str(exc)) from None
        with session_scope(make_sessionmaker(engine)) as session:
            yield session
    finally:
        engine.dispose()


def cmd_migrate(args: argparse.Namespace) -> int:
    from app.db import engine_for, upgrade

    settings = _settings()
    url = settings.resolved_database_url
    upgrade(url, args.revision)
    from app.db import current_revision

    engine = engine_for(settings)
    try:
        print(f"metadata DB at revision {current_revision(engine)}")
    finally:
        engine.dispose()
    return 0


def cmd_token_create(args: argparse.Namespace) -> int:
    from app.services.accounts.tokens import TokenError, create_token
    from app.services.accounts.users import UserError, find_user

    with _session() as session:
        try:
            owner = find_user(session, args.user).id if args.user else None
            new = create_token(session, args.name, args.scope, user_id=owner)
        except (TokenError, UserError) as exc:
            raise UsageError(f"token: {exc}") from None
    print(f"token {new.id} ({new.scope}) created; it is shown only once:", file=sys.stderr)
    print(new.token)
    return 0


def cmd_token_list(args: argparse.Namespace) -> int:
    from app.services.accounts.tokens import list_tokens
    from app.services.reads.reports import iso

    with _session() as session:
        rows = list_tokens(session)
    print(f"{'ID':>4}  {'SCOPE':6}  {'PREFIX':10}  {'CREATED':27}  {'LAST USED':27}  {'STATE':7}  NAME")
    for t in rows:
        state = "revoked" if t.revoked_at else "active"
        print(f"{t.id:>4}  {t.scope:6}  {t.prefix:10}  {iso(t.created_at):27}  {iso(t.last_used_at) or '-':27}  "
              f"{state:7}  {t.name}")
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    from app.services.accounts.tokens import TokenError, revoke_token

    with _session() as session:
        try:
            row = revoke_token(session, args.id)
        except TokenError as exc:
            raise UsageError(f"token: {exc}") from None
    print(f"token {row.id} ({row.name}) revoked")
    return 0


def _read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass("Password: ")
    if getpass.getpass("Repeat: ") != password:
        raise UsageError("user: the passwords differ")
    return password


def cmd_user_password(args: argparse.Namespace) -> int:
    from app.services.accounts.users import UserError, find_user, set_password

    password = _read_password(args)
    with _session() as session:
        try:
            ended = set_password(session, find_user(session, args.username), password)
        except UserError as exc:
            raise UsageError(f"user: {exc}") from None
    print(f"password of {args.username} changed; {ended} web session(s) ended")
    return 0


def cmd_user_set_active(args: argparse.Namespace) -> int:
    from app.services.accounts.users import UserError, find_user, set_active

    with _session() as session:
        try:
            ended = set_active(session, find_user(session, args.username), args.active)
        except UserError as exc:
            raise UsageError(f"user: {exc}") from None
    state = "enabled" if args.active else f"disabled; {ended} web session(s) ended, its tokens are refused"
    print(f"user {args.username} {state}")
    return 0


def cmd_user_create(args: argparse.Namespace) -> int:
    from app.services.accounts.users import UserError, create_user

    password = _read_password(args)
    with _session() as session:
        try:
            user = create_user(session, args.username, password, is_admin=args.admin)
        except UserError as exc:
            raise UsageError(f"user: {exc}") from None
    print(f"user {user.username} created{' (admin)' if user.is_admin else ''}")
    return 0
