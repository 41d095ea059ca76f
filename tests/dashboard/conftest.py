"""Fixtures of the dashboard tests: a real uvicorn server in a thread and a
headless Chromium driven by Playwright (skipped, with the reason, when
either is missing, unless PROCQUEUE_REQUIRE_BROWSER=1)."""

from __future__ import annotations

import importlib.util
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn

from procqueue.dashboard import create_app
from procqueue.testing import wait_until

CHROMIUM = os.environ.get("PROCQUEUE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

Serve = Callable[..., AbstractContextManager[str]]


def browser_missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install 'procqueue[dev]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session."""
    reason = browser_missing()
    if reason is not None:
        if os.environ.get("PROCQUEUE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser tests required but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class Tab:
    """A browser page with what it reported: dialogs opened, script and CSP errors."""

    page: Any
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def tab(browser: Any) -> Iterator[Tab]:
    """A fresh page with its own cookies; fails the test on a script or CSP error."""
    context = browser.new_context(viewport={"width": 1360, "height": 860})
    tab = Tab(context.new_page())
    tab.page.set_default_timeout(15_000)

    def on_dialog(dialog: Any) -> None:
        tab.dialogs.append(dialog.message)
        dialog.dismiss()

    def on_console(message: Any) -> None:
        # Network failures are expected once a test stops its server; not so
        # script errors and Content-Security-Policy refusals.
        if message.type == "error" and "Failed to load resource" not in message.text:
            tab.errors.append(message.text)

    tab.page.on("dialog", on_dialog)
    tab.page.on("console", on_console)
    tab.page.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    try:
        yield tab
    finally:
        context.close()
    assert tab.errors == [], "the page logged errors"


@contextmanager
def serving(dsn: str, token: str | None = None, poll_interval: float = 0.2) -> Iterator[str]:
    """The dashboard on a free loopback port, served by uvicorn in a thread; yields its URL."""
    dashboard = create_app(
        dsn, token, allowed_hosts=["127.0.0.1", "localhost"], poll_interval=poll_interval
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(dashboard, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="dashboard", daemon=True
    )
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), what="uvicorn to start")
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def serve() -> Serve:
    return serving
