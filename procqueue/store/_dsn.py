"""A DSN as messages show it: never with its password."""

from __future__ import annotations

import urllib.parse


def describe(dsn: str) -> str:
    """`dsn` without its password, for messages."""
    try:
        parts = urllib.parse.urlsplit(dsn)
    except ValueError:  # unparsable: keep only what follows the credentials
        return "..." + dsn.rsplit("@", 1)[1] if "@" in dsn else dsn
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
