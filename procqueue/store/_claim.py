"""The claim algorithm: which of the due pending jobs one claim takes, and
what a record-and-claim cycle and a lease renewal return.

`_sql.SqlStore.job_record_and_claim` reads the candidates under the claim
lock and takes the ids `choose` picks, so that queue limits and serial keys
mean the same thing on every backend.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import msgspec

from procqueue import models


class Candidate(msgspec.Struct, frozen=True):
    """A pending job a claim may take, as `job_candidates` reads it."""

    id: int
    queue: str
    serial_key: str | None
    room: int | None
    """How many more jobs of its queue may start now (None: the queue has no limit)."""
    priority: int = 0
    run_at: float = 0.0
    group: str | None = None
    group_room: int | None = None
    """How many more jobs of its group may be held now (None: no group_limit)."""
    served_at: float | None = None
    """When a claim last served its group (None: never, or no group)."""
    rate_keys: tuple[str, ...] = ()
    """The rate limits a start of it counts against (``job:NAME``, ``group:G``, ``queue:Q``)."""


class Cycle(msgspec.Struct, frozen=True):
    """What one record-and-claim transaction did."""

    lost: list[int]
    """Ids whose outcome was not recorded: the attempt was no longer theirs."""
    claimed: list[models.ClaimedJob]
    throttled: list[str] = []
    """The limits (``rate job:NAME``, ``group_limit G``, ...) that held back a
    job this claim would otherwise have taken."""


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
    return count * 2 + 4


class Choice(msgspec.Struct, frozen=True):
    """The jobs one claim takes and what taking them counts against."""

    ids: list[int]
    """In the order taken."""
    starts: list[tuple[str, float]]
    """(rate key, time) to record: one per start and rate limit it counts against."""
    served: list[tuple[str, float]]
    """(group, time) for each group served, the last time of each last."""
    throttled: list[str]
    """Limits that held back a candidate within the claim."""


def choose(
    candidates: Iterable[Candidate],
    *,
    count: int,
    now: float,
    rooms: dict[str, int] | None = None,
    start: int | None = None,
) -> Choice:
    """The jobs a claim takes from `candidates`, which already exclude full
    queues, running serial keys, groups at their limit and spent rates.

    Order: priority (higher first); within it, groups rotate: each job
    waits as if it became due when its group was last served (an
    ungrouped job from its run_at), so the least recently served group
    goes first and a group served in this claim goes behind every other;
    then run_at and id. Within the claim no queue passes its room, no
    group its `group_room`, no rate key its room in `rooms` (key: starts
    left in its window), and no serial key is taken twice. A rate-limited
    job is only taken among the first `start` (None: all), the ones that
    start now: a start is counted when it happens, never ahead. The caller
    runs it inside the transaction (or lock) that makes each room current.
    """
    rooms = dict(rooms or {})
    lanes: dict[object, list[Candidate]] = {}
    for c in sorted(candidates, key=lambda c: (-c.priority, c.run_at, c.id)):
        lanes.setdefault(c.group if c.group is not None else ("job", c.id), []).append(c)
    served_at = {g: lane[0].served_at or 0.0 for g, lane in lanes.items() if isinstance(g, str)}
    # A group served now goes behind every group seen, even one served by a
    # supervisor whose clock is ahead of this one's.
    stamp = max([now, *served_at.values()])
    heap = [(_rank(lane[0], served_at), lane_id) for lane_id, lane in enumerate(lanes.values())]
    lane_list = list(lanes.values())
    heapq.heapify(heap)
    taken: list[int] = []
    starts: list[tuple[str, float]] = []
    served: dict[str, float] = {}
    used: dict[str, int] = {}
    held: dict[str, int] = {}
    serial: set[str] = set()
    throttled: dict[str, None] = {}
    while heap and len(taken) < count:
        _, lane_id = heapq.heappop(heap)
        lane = lane_list[lane_id]
        c = lane.pop(0)
        refused = _refusal(c, used, held, serial, rooms, len(taken), start)
        if refused is None:
            taken.append(c.id)
            used[c.queue] = used.get(c.queue, 0) + 1
            if c.serial_key is not None:
                serial.add(c.serial_key)
            for key in c.rate_keys:
                rooms[key] -= 1
                starts.append((key, now))
            if c.group is not None:
                held[c.group] = held.get(c.group, 0) + 1
                served[c.group] = served_at[c.group] = stamp + len(taken) * 1e-6
        elif refused:
            throttled[refused] = None
        if lane:
            heapq.heappush(heap, (_rank(lane[0], served_at), lane_id))
    return Choice(ids=taken, starts=starts, served=list(served.items()), throttled=list(throttled))


def _rank(c: Candidate, served_at: dict[str, float]) -> tuple[int, float, float, int]:
    waits_from = c.run_at if c.group is None else served_at[c.group]
    return (-c.priority, waits_from, c.run_at, c.id)


def _refusal(
    c: Candidate,
    used: dict[str, int],
    held: dict[str, int],
    serial: set[str],
    rooms: dict[str, int],
    taken: int,
    start: int | None,
) -> str | None:
    """Why the claim can't take `c` now: None if it can, '' for a reason no
    limit of the flow options is behind, else the limit's name."""
    if c.room is not None and used.get(c.queue, 0) >= c.room:
        return ""
    if c.serial_key is not None and c.serial_key in serial:
        return ""
    if c.group is not None and c.group_room is not None and held.get(c.group, 0) >= c.group_room:
        return f"group_limit {c.group}"
    for key in c.rate_keys:
        if rooms.get(key, 0) <= 0:
            return f"rate {key}"
    if c.rate_keys and start is not None and taken >= start:
        return ""
    return None
