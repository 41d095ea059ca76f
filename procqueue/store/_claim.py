"""The claim algorithm: which of the due pending jobs one claim takes, and
what a record-and-claim cycle and a lease renewal return.

`_sql.SqlStore.job_record_and_claim` reads the candidates under the claim
lock and takes the ids `choose` picks, so that queue limits and serial keys
mean the same thing on every backend.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from procqueue import models


class Candidate(msgspec.Struct, frozen=True):
    """A pending job a claim may take, in claim order."""

    id: int
    queue: str
    serial_key: str | None
    room: int | None
    """How many more jobs of its queue may start now (None: the queue has no limit)."""


class Cycle(msgspec.Struct, frozen=True):
    """What one record-and-claim transaction did."""

    lost: list[int]
    """Ids whose outcome was not recorded: the attempt was no longer theirs."""
    claimed: list[models.ClaimedJob]


class Renewal(msgspec.Struct, frozen=True):
    """The result of renewing an owner's leases."""

    alive: set[tuple[int, int]]
    """(id, attempt) of every job the owner still holds."""
    cancel_requested: set[int]
    """Ids among them whose cancel was requested."""


def overfetch(count: int) -> int:
    """How many candidates a claim of `count` reads: more than it takes, so
    that jobs blocked within the batch (a serial key twice, a queue's last
    slot) don't starve the ones behind them."""
    return count * 4 + 16


def choose(candidates: Iterable[Candidate], *, count: int) -> list[int]:
    """The ids a claim takes from `candidates`, which are in claim order and
    already exclude full queues and running serial keys.

    Within the claim no queue passes its room and no serial key is taken
    twice. The caller runs it inside the transaction (or lock) that makes
    each candidate's room current.
    """
    taken: list[int] = []
    used: dict[str, int] = {}
    serial: set[str] = set()
    for c in candidates:
        if len(taken) >= count:
            break
        if c.room is not None and used.get(c.queue, 0) >= c.room:
            continue
        if c.serial_key is not None:
            if c.serial_key in serial:
                continue
            serial.add(c.serial_key)
        used[c.queue] = used.get(c.queue, 0) + 1
        taken.append(c.id)
    return taken
