"""What every part of the loop that asks the database about the attempts it
holds is given: the attempts, their children, the store and the database
thread. `claims.Claims` and `reports.AttemptWrites` are such parts; the
loop builds each once and they never replace what they were given.
"""

from __future__ import annotations

from dataclasses import dataclass

from procqueue.store.base import Store
from procqueue.supervisor.children.slots import Children
from procqueue.supervisor.dbthread import DbCalls
from procqueue.supervisor.running import Attempts
from procqueue.supervisor.settings import Settings


@dataclass(eq=False, kw_only=True)
class DbPart:
    """A part that turns what `attempts` need into calls on `store`, each
    submitted to `db` (never waited on), and tells the children in `pool`
    what the database answered. It reads attempts and asks `attempts` to
    change them: `Attempts` stays their one writer."""

    attempts: Attempts
    pool: Children
    store: Store
    db: DbCalls
    settings: Settings
