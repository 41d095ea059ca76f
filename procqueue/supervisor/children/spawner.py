"""Where the pool's new children come from: warm from a fork server's
template (`forkserver`) once it loaded the app, clean before
that and while it is down (a dead template is replaced after a pause).
"""

from __future__ import annotations

import logging
import selectors

from procqueue.clock import Clock
from procqueue.supervisor.children import forkserver, process

log = logging.getLogger("procqueue.supervisor")

FORK_TIMEOUT = 2.0
"""How long a fork from the fork server may take before the child is
started clean instead (and that template dropped)."""
FORKSERVER_RETRY_S = 5.0
"""A new template at most this often after one died or failed."""


class Spawner:
    """Starts children for one pool; the template's socket is registered in
    the supervisor's selector with data ``(0, "fork")``."""

    def __init__(
        self,
        *,
        spec: str,
        clock: Clock,
        selector: selectors.BaseSelector,
        env: dict[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.env = env
        """The children's environment (None: the supervisor's)."""
        self.clock = clock
        self.selector = selector
        self.forkserver: forkserver.ForkServer | None = None
        self._down_at: float | None = None

    def start(self) -> None:
        self.forkserver = forkserver.ForkServer(self.spec, env=self.env)
        self.selector.register(self.forkserver.fileno(), selectors.EVENT_READ, (0, "fork"))
        self._down_at = None

    def close(self) -> None:
        fs = self.forkserver
        if fs is None:
            return
        self.selector.unregister(fs.fileno())
        fs.close()
        self.forkserver = None
        self._down_at = self.clock.monotonic()

    def pump(self) -> None:
        """The fork server's socket is readable: exits to take in, or its end."""
        fs = self.forkserver
        if fs is not None:
            fs.pump()
            if fs.dead:
                log.warning("fork server: %s; children start clean for now", fs.error)
                self.close()

    def new_child(self, index: int) -> process.ChildBase:
        down = self._down_at
        if down is not None and self.clock.monotonic() - down >= FORKSERVER_RETRY_S:
            self.start()
        fs = self.forkserver
        if fs is not None and fs.ready():
            try:
                return fs.spawn(index, timeout=FORK_TIMEOUT)
            except forkserver.ForkServerError as exc:
                log.warning("%s; starting child %d clean", exc, index)
                self.close()
        return process.ChildProcess(spec=self.spec, index=index, env=self.env)
