"""`Client`: the producer and control API over one database.

It owns the store (opened and migrated on first use) and validates every
enqueue against a `Registry` before writing. `App` creates one lazily, the
first time a method needs the database, so that importing job code (what a
child does) never imports `procqueue.store`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from procqueue import errors, models
from procqueue import store as store_mod
from procqueue.clock import Clock
from procqueue.jobs.registry import Registry
from procqueue.producer import batches
from procqueue.store.base import SCHEMA_VERSION


class Client:
    """Enqueues, reads and controls the jobs of one database.

    Thread-safe: the store is opened once under a lock, and wake-up hooks
    are replaced, never changed in place, so a hook list being iterated
    never changes under an enqueue.

    Args:
        registry: the jobs enqueues are checked and encoded against.
        dsn: the database; None resolves ``$PROCQUEUE_DSN``, the config
            file, then ``sqlite:///procqueue.db`` when the store is opened.
        clock: the time source for every write and for `wait`.
    """

    def __init__(
        self, registry: Registry, *, dsn: str | None, clock: Clock, migrate: bool = True
    ) -> None:
        self.registry = registry
        self.dsn = dsn
        self.clock = clock
        self.migrate = migrate
        self._store: store_mod.Store | None = None
        self._lock = threading.Lock()
        self._wake_hooks: tuple[Callable[[], None], ...] = ()
        self.batches = batches.Batches(
            store=lambda: self.store, registry=registry, clock=clock, wake=self.wake
        )
        """Batch calls; enqueues inside ``with client.batches.open(...)`` join it."""

    @property
    def store(self) -> store_mod.Store:
        """The open store, migrated on first use (again after `close`); without
        `migrate`, a database whose schema is not this version's is a
        StoreError and is left as it is (a mistyped DSN creates nothing)."""
        with self._lock:
            if self._store is None:
                dsn = store_mod.resolve_dsn(self.dsn)
                opened = store_mod.open_store(dsn, create=self.migrate)
                try:
                    if self.migrate:
                        opened.migrate(now=self.clock.now())
                    else:
                        _check_schema(opened, dsn)
                except BaseException:
                    opened.close()
                    raise
                self._store = opened
            return self._store

    def close(self) -> None:
        """Closes the store; the next call opens it again. Idempotent."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def on_enqueue(self, hook: Callable[[], None]) -> None:
        """Calls `hook` after every enqueue or retry through this client."""
        with self._lock:
            self._wake_hooks = (*self._wake_hooks, hook)

    def off_enqueue(self, hook: Callable[[], None]) -> None:
        """Stops calling `hook` (one subscription of it); a no-op if it isn't subscribed."""
        with self._lock:
            hooks = list(self._wake_hooks)
            if hook in hooks:
                hooks.remove(hook)
                self._wake_hooks = tuple(hooks)

    def wake(self) -> None:
        """Calls every enqueue hook (a job became due through this client)."""
        for hook in self._wake_hooks:
            hook()

    # -- producing --------------------------------------------------------

    def insert(self, jobs: Sequence[models.NewJob], *, connection: object | None) -> list[int]:
        """Writes prepared `jobs` in one transaction (the caller's, given a
        `connection`), as members of the batch open in this context if any;
        returns their ids in order. All or nothing."""
        if not jobs:
            return []
        ids = self.store.job_insert_many(
            jobs=self.batches.join(jobs), now=self.clock.now(), connection=connection
        )
        self.wake()
        return ids


def _check_schema(store: store_mod.Store, dsn: str) -> None:
    """StoreError (SchemaTooNew) unless `store` has this procqueue's schema."""
    version, known = store.schema_version(), SCHEMA_VERSION
    where = store_mod.describe(dsn)
    if version == 0:
        raise errors.StoreError(
            f"no procqueue schema in {where} (procqueue migrate creates it; check the DSN)"
        )
    if version > known:
        raise errors.SchemaTooNew(
            f"{where} has schema version {version}, this procqueue knows up to {known}"
        )
    if version < known:
        raise errors.StoreError(
            f"{where} has schema version {version}, older than this procqueue's {known} "
            "(procqueue migrate upgrades it)"
        )
