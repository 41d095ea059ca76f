"""``procqueue dashboard``: checks what it is given (the database, the
address, the token a non-loopback address needs), then serves the web page
until interrupted."""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
import signal
from typing import Any

from procqueue import errors
from procqueue import store as store_mod
from procqueue.cli.commands import LoadError, check_listen
from procqueue.producer.app import App

DASHBOARD_MISSING = "the dashboard needs the dashboard extra: pip install 'procqueue[dashboard]'"
DASHBOARD_TOKEN_ENV = "PROCQUEUE_DASHBOARD_TOKEN"


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Serves the web dashboard until interrupted."""
    try:
        dashboard: Any = importlib.import_module("procqueue.dashboard.app")
    except ModuleNotFoundError as exc:
        if not _dashboard_part(exc.name):
            raise
        raise LoadError(DASHBOARD_MISSING) from None
    dsn = store_mod.resolve_dsn(args.dsn)
    check_listen(args.host, args.port)
    token = args.token or os.environ.get(DASHBOARD_TOKEN_ENV) or None
    if token is not None and token != token.strip():
        raise errors.ConfigError("a dashboard token can't be blank or start or end with a space")
    if token is None and not _loopback(args.host):
        raise errors.ConfigError(
            f"the dashboard can retry and cancel jobs: listening on {args.host} "
            f"needs a token (--token or ${DASHBOARD_TOKEN_ENV})"
        )
    probe = App(dsn)
    probe.migrate = False  # a dashboard never creates a database or a schema
    try:
        _ = probe.store  # a malformed or unreachable DSN, or one without the schema, fails here
    finally:
        probe.close()
    # uvicorn stops on SIGTERM, then raises the signal again for the handler
    # it found: make that an exit with code 0, as for the supervisor's drain.
    previous = signal.signal(signal.SIGTERM, _exit_0)
    try:
        dashboard.serve(dsn, host=args.host, port=args.port, token=token)
    except ModuleNotFoundError as exc:  # serve imports uvicorn when called
        if not _dashboard_part(exc.name):
            raise
        raise LoadError(DASHBOARD_MISSING) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _loopback(host: str) -> bool:
    """Whether `host` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _exit_0(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _dashboard_part(module: str | None) -> bool:
    """Whether `module` is the dashboard or one of the dashboard extra's packages."""
    top = (module or "").split(".")[0]
    return top in ("starlette", "uvicorn", "jinja2") or (module or "").startswith(
        "procqueue.dashboard"
    )
