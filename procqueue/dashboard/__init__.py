"""The web dashboard (optional extra ``procqueue[dashboard]``).

`create_app(dsn, token=None)` gives the Starlette app; `serve(dsn, host,
port, token)` runs it with uvicorn. See docs/dashboard.md.
"""

from __future__ import annotations

from procqueue.dashboard.app import create_app, serve

__all__ = ["create_app", "serve"]
