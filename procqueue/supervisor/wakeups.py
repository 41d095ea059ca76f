"""What wakes the supervision loop besides its children: a self-pipe that
any thread or signal handler may write (an enqueue in this process, a
database answer, a stop request), and the store's wake-up descriptor (jobs
enqueued elsewhere). That descriptor is drained and (re-)opened on the
database thread, never in the loop: it changes when the store reconnects.
"""

from __future__ import annotations

import os
import selectors
from collections.abc import Callable

from procqueue import errors
from procqueue.store.base import Store
from procqueue.supervisor.dbthread import DbCalls


class Wakeups:
    """The loop's wake-up descriptors, registered in its selector with no data."""

    def __init__(self, *, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._store_fd: int | None = None

    def start(self) -> None:
        self.selector.register(self._r, selectors.EVENT_READ, None)

    def wake(self) -> None:
        """Makes the loop run a pass as soon as possible (safe from any thread
        and from a signal handler)."""
        if self._w < 0:
            return  # closed: the descriptor number may belong to another file now
        try:
            os.write(self._w, b"w")
        except (BlockingIOError, OSError):
            pass

    def listening(self) -> bool:
        """Whether the store's wake-up descriptor is watched."""
        return self._store_fd is not None

    def readable(self, fd: int) -> bool:
        """Empties `fd`; True when it was the store's descriptor, which is then
        no longer watched: jobs came, and `listen` watches it again."""
        if fd == self._r:
            try:  # a short read emptied it: no second read to learn so
                while len(os.read(self._r, 4096)) == 4096:
                    pass
            except BlockingIOError:
                pass
            return False
        self.selector.unregister(fd)
        self._store_fd = None
        return True

    def listen(self, *, db: DbCalls, store: Store, then: Callable[[], None] | None) -> None:
        """Drains and (re-)opens the store's wake-up descriptor on the database
        thread, then watches it and calls `then` (when given: a claim may be due)."""
        if db.busy("listen"):
            return

        def listen() -> int | None:
            store.wake_drain()
            try:
                return store.wake_fileno()
            except errors.StoreError:
                return None

        def listened(fd: int | None) -> None:
            if then is not None:
                then()
            if fd is None or self._w < 0:
                return
            try:
                self.selector.register(fd, selectors.EVENT_READ, None)
                self._store_fd = fd
            except (KeyError, ValueError):
                pass

        db.submit("listen", listen, on_done=listened)

    def close(self) -> None:
        """Closes the self-pipe (after the selector): `wake` does nothing from now on."""
        r, w = self._r, self._w
        self._r = self._w = -1
        os.close(r)
        os.close(w)
