"""What the rest of the supervisor asks of its children (`Children`), and
what a child's death reports (`Death`).

`pool.Pool` is the implementation with real processes; a loop test may pass
the supervisor a small in-memory one that keeps the same promises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from procqueue import protocol


@dataclass(frozen=True)
class Death:
    """A child that exited and was replaced."""

    child: int
    pid: int
    reason: str
    retired: bool
    killed: bool
    frames: tuple[protocol.Message, ...] = ()
    """What it wrote before it died and was not read yet: acted on before the death."""


class Children(Protocol):
    """N numbered slots (from 1), each holding one child process at a time."""

    def start(self) -> None:
        """Starts a child in every slot."""

    def pid(self, index: int) -> int:
        """The slot's child's pid (0 when it has none)."""

    def available(self) -> list[int]:
        """Slots whose child is ready and may take a job (busy ones included)."""

    def jobs_left(self, index: int) -> int | None:
        """Jobs the child may still be given before it is recycled (None: no limit)."""

    def stopping(self, index: int) -> bool:
        """Whether the child was told to stop or killed (it takes no new job)."""

    def all_ready(self) -> bool:
        """Whether every slot's child has said hello."""

    def any_dead(self) -> bool:
        """Whether a child's pipe closed and it waits to be reaped."""

    def next_kill(self) -> float | None:
        """The earliest pending SIGKILL escalation or unfinished-frame
        deadline (monotonic), if any."""

    def rss_mb(self, index: int) -> float:
        """Resident memory of the child's whole process tree, in MB."""

    def send(self, index: int, message: protocol.Message) -> bool:
        """Queues one frame for the child; False if it is gone."""

    def flush(self, index: int | None = None) -> None:
        """Writes queued frames as far as the pipes take them, never blocking."""

    def read(self, index: int) -> tuple[list[protocol.Message], str | None]:
        """The frames the child wrote, and the protocol error that ends its pipe."""

    def relay(self, index: int, fd: int, job_id: int | None) -> None:
        """Logs what the child wrote on `fd`, tagged with its job."""

    def end_output(self, index: int, job_id: int) -> None:
        """The child replied for `job_id`: logs all it wrote before, under that job."""

    def pump(self) -> None:
        """Moves the answers of whatever starts children along."""

    def stop(self, index: int, job_id: int, *, grace: float | None) -> None:
        """Asks the child to end `job_id`; SIGKILL after `grace` s (None: never)."""

    def kill(self, index: int) -> None:
        """SIGKILLs the child's whole process tree at once."""

    def escalate(self, now: float) -> None:
        """SIGKILLs the trees whose grace after SIGTERM has passed."""

    def unfinished(self, now: float) -> list[int]:
        """Slots whose pipe has held the same unfinished frame too long, each told once."""

    def job_done(self, index: int) -> None:
        """The child finished a job and lives on; recycles it if it is due."""

    def reap(self, job_of: dict[int, int]) -> list[Death]:
        """Children that exited: released, replaced unless stopping, reported."""

    def stop_respawning(self) -> None:
        """From now on a child that exits is not replaced."""

    def shutdown(self, *, wait: float) -> None:
        """Stops every child, SIGKILLing those still there after `wait` s."""
