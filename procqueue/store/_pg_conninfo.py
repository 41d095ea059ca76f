"""How a PostgreSQL store connects: its schema from the DSN, and the bounds
every one of its sessions runs under."""

from __future__ import annotations

import math
import re
import urllib.parse
from typing import Any

import msgspec

from procqueue import errors
from procqueue.store._dsn import describe

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,52}")  # "procqueue_" + 53 = 63, NOTIFY's limit
DEFAULT_SCHEMA = "procqueue"

# Every call is bounded (DESIGN.md section 3): the supervision loop must
# never wait on the database for longer than it can afford, whatever the
# server or the network does. These are the defaults of `Bounds`.

STATEMENT_TIMEOUT_DEFAULT = 10.0
"""Seconds one statement may run. A claim, a renewal or a bounded prune
batch takes milliseconds; a statement still running after 10 s is stuck
(a lock held by a hand-run transaction, an overloaded server)."""

LOCK_TIMEOUT_DEFAULT = 5.0
"""Seconds a statement may wait for a lock (a row, a table, the claim or
migration advisory lock). Shorter than the statement bound, so that the
error says what happened: someone holds a lock."""

IDLE_IN_TRANSACTION_TIMEOUT_DEFAULT = 30.0
"""Seconds a session may sit in an open transaction doing nothing before
the server ends it: no transaction of the store waits on anything but the
database, so one idling is a dead or frozen client holding its locks."""

CONNECT_TIMEOUT_DEFAULT = 5.0
"""Seconds to establish a connection (libpq counts whole seconds, at least 2)."""

TCP_USER_TIMEOUT_DEFAULT = 10.0
"""Seconds sent data may stay unacknowledged before the connection is
dropped: a server that vanished from the network fails the call instead
of leaving it waiting for TCP's own retransmission timeout (~15 minutes)."""

KEEPALIVES_IDLE_S = 5
KEEPALIVES_INTERVAL_S = 2
KEEPALIVES_COUNT = 3
"""TCP keepalives: an idle connection whose peer vanished (the LISTEN
connection, mostly) is found dead after ~5 + 2 * 3 = 11 seconds."""

POOL_WAIT_DEFAULT = 10.0
"""Seconds a call waits for a pooled connection (all busy, or the server
unreachable and being reconnected to)."""

MIGRATION_TIMEOUT = 600.0
"""Seconds a migration may run and wait for another process's migration:
DDL on a large table takes longer than any other statement."""


class Bounds(msgspec.Struct, frozen=True):
    """How long a PostgreSQL store's calls may wait, in seconds (all > 0)."""

    statement: float = STATEMENT_TIMEOUT_DEFAULT
    lock: float = LOCK_TIMEOUT_DEFAULT
    idle_in_transaction: float = IDLE_IN_TRANSACTION_TIMEOUT_DEFAULT
    connect: float = CONNECT_TIMEOUT_DEFAULT
    tcp_user: float = TCP_USER_TIMEOUT_DEFAULT
    pool_wait: float = POOL_WAIT_DEFAULT

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < math.inf):
                raise errors.ConfigError(f"PostgreSQL bound {name} must be > 0 seconds: {value!r}")

    def session(self, params: dict[str, Any], *, schema: str) -> dict[str, Any]:
        """The libpq parameters of every connection, given the DSN's own
        `params`: a parameter the DSN sets wins, and the DSN's ``options``
        come after these (so its ``-c`` settings override them)."""
        ours: dict[str, Any] = {
            "connect_timeout": max(2, math.ceil(self.connect)),
            "keepalives": 1,
            "keepalives_idle": KEEPALIVES_IDLE_S,
            "keepalives_interval": KEEPALIVES_INTERVAL_S,
            "keepalives_count": KEEPALIVES_COUNT,
            "tcp_user_timeout": math.ceil(self.tcp_user * 1000),
            "application_name": f"procqueue:{schema}",  # lets tests and operators find them
        }
        kwargs = {k: v for k, v in ours.items() if k not in params}
        settings = (
            ("statement_timeout", self.statement),
            ("lock_timeout", self.lock),
            ("idle_in_transaction_session_timeout", self.idle_in_transaction),
        )
        gucs = " ".join(f"-c {name}={math.ceil(s * 1000)}" for name, s in settings)
        # Every statement is short: JIT compiling one (which cost estimates
        # can trigger, e.g. a claim's on tables without statistics yet) takes
        # far longer than running it.
        gucs += " -c jit=off"
        kwargs["options"] = f"{gucs} {params['options']}" if params.get("options") else gucs
        return kwargs


def split_dsn(dsn: str) -> tuple[str, str]:
    """`(conninfo, schema)`: the DSN without its ``schema=`` parameter, and that schema.

    Raises ConfigError for a schema that is not a plain lowercase identifier.
    """
    try:
        parts = urllib.parse.urlsplit(dsn)
        parts.port  # noqa: B018  (parsing the port validates it)
    except ValueError as exc:
        raise errors.ConfigError(f"malformed DSN {describe(dsn)!r}: {exc}") from None
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    names = [value for key, value in query if key == "schema"]
    if len(names) > 1:
        raise errors.ConfigError(f"DSN {describe(dsn)!r} names schema= more than once")
    schema = names[0] if names else DEFAULT_SCHEMA
    if schema.startswith("pg_") or schema == "information_schema":
        raise errors.ConfigError(f"schema {schema!r} in DSN is reserved by PostgreSQL")
    if not _SCHEMA_NAME.fullmatch(schema):
        raise errors.ConfigError(
            f"invalid schema name {schema!r} in DSN: use 1-53 characters of a-z, 0-9 and _, "
            "not starting with a digit"
        )
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "schema"])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), schema
