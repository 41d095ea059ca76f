"""Producing and controlling jobs through the Python API, on both backends."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Iterator

import pytest

from procqueue import App, Backoff, EnqueueError, InvalidState, JobNotFound, JobState
from procqueue.testing import ManualClock
from tests.helpers import JOB
from tests.jobs import basic


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn, clock=ManualClock())
    yield a
    a.close()


def count(app: App) -> int:
    return len(app.jobs(limit=1000))


def test_enqueue_by_job_by_name_and_configured(app: App) -> None:
    a = app.enqueue(JOB + "add", {"a": 1, "b": 2})
    b = app.enqueue(JOB + "add", {"a": 1, "b": 2}, priority=5, queue="bulk", tags=["x"])
    c = basic.add.configure(delay=10, key="k1").enqueue(a=1, b=3)  # bound to basic.app
    assert a < b
    info = app.get(b)
    assert (info.priority, info.queue, info.tags, info.args) == (5, "bulk", ["x"], {"a": 1, "b": 2})
    assert c > 0


def test_idempotent_key_returns_the_existing_job(app: App) -> None:
    first = app.enqueue(JOB + "add", {"a": 1, "b": 2}, key="once")
    again = app.enqueue(JOB + "add", {"a": 5, "b": 5}, key="once")
    assert first == again and count(app) == 1


def test_enqueue_many_is_one_batch(app: App) -> None:
    ids = app.enqueue_many([(JOB + "add", {"a": i, "b": i}, {"priority": i}) for i in range(50)])
    assert len(set(ids)) == 50 and count(app) == 50


def test_delay_run_at_and_deadline_resolve_against_the_clock(app: App) -> None:
    now = app.clock.now()
    job_id = app.enqueue(JOB + "add", {"a": 1, "b": 2}, delay=30, deadline=60)
    info = app.get(job_id)
    assert info.run_at.timestamp() == pytest.approx(now + 30, abs=1)
    assert info.deadline_at is not None
    assert info.deadline_at.timestamp() == pytest.approx(now + 60, abs=1)
    at = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert app.get(app.enqueue(JOB + "add", {"a": 1, "b": 2}, run_at=at)).run_at == at


def test_rich_values_are_encoded(app: App) -> None:
    value = {
        "when": dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC),
        "id": uuid.UUID(int=7),
        "price": decimal.Decimal("1.50"),
        "nested": [[[{"deep": True}]]],
        "unicode": "héllo ✓",
    }
    info = app.get(app.enqueue(JOB + "echo", {"value": value}))
    assert info.args["value"]["id"] == str(uuid.UUID(int=7))
    assert info.args["value"]["nested"] == [[[{"deep": True}]]]


@pytest.mark.parametrize(
    ("name", "args", "options", "words"),
    [
        (JOB + "add", {"a": 1}, {}, "missing a required argument: 'b'"),
        (JOB + "add", {"a": 1, "b": 2, "c": 3}, {}, "unexpected keyword argument 'c'"),
        (JOB + "echo", {"value": object()}, {}, "argument 'value'"),
        (JOB + "echo", {"value": [1.0, {"x": float("nan")}]}, {}, "NaN or infinity"),
        (JOB + "echo", {"value": "\ud800"}, {}, "argument 'value'.*surrogates"),
        (JOB + "add", {"a": 1, "b": 2}, {"colour": "red"}, "unknown option 'colour'"),
        (JOB + "add", {"a": 1, "b": 2}, {"delay": -1}, "delay must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"max_attempts": 0}, "max_attempts"),
        (JOB + "add", {"a": 1, "b": 2}, {"priority": "high"}, "invalid option"),
        (JOB + "add", {"a": 1, "b": 2}, {"run_at": dt.datetime(2030, 1, 1)}, "timezone-aware"),
        # the same refusal on both backends, before either sees the value
        (JOB + "add", {"a": 1, "b": 2}, {"delay": float("inf")}, "delay must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"delay": float("nan")}, "delay must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"timeout": float("inf")}, "timeout must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"deadline": float("inf")}, "deadline must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"priority": 2**31}, "priority must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"priority": 2**63}, "priority must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"max_attempts": 2**31}, "max_attempts must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"max_memory": 2**31}, "max_memory must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"backoff": {"base": float("nan")}}, "invalid option"),
        (JOB + "add", {"a": 1, "b": 2}, {"key": "a\x00b"}, "key must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"queue": "q\x00"}, "NUL"),
        ("no_such.job\x00", {}, {}, "without NUL"),
        (JOB + "add", {"a": 1, "b": 2}, {"rate_limit": "5/d"}, "rate_limit: a rate is"),
        (JOB + "add", {"a": 1, "b": 2}, {"rate_limit": "0/s"}, "rate_limit: a rate is"),
        (JOB + "add", {"a": 1, "b": 2}, {"group_rate": 5}, "invalid option"),
        (JOB + "add", {"a": 1, "b": 2}, {"group_limit": 0}, "group_limit must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"group": ""}, "group must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"debounce": 5}, "debounce needs a key"),
        (JOB + "add", {"a": 1, "b": 2}, {"key": "k", "debounce": -1}, "debounce must be"),
        (JOB + "add", {"a": 1, "b": 2}, {"debounce_max": float("nan")}, "debounce_max must"),
    ],
)
def test_bad_input_raises_and_writes_nothing(
    app: App, name: str, args: dict[str, object], options: dict[str, object], words: str
) -> None:
    with pytest.raises(EnqueueError, match=words.replace("(", r"\(")) as caught:
        app.enqueue(name, args, **options)
    assert "\n" not in str(caught.value)
    assert count(app) == 0


def test_a_bad_item_in_a_batch_writes_none_of_it(app: App) -> None:
    with pytest.raises(EnqueueError):
        app.enqueue_many([(JOB + "add", {"a": 1, "b": 1}, None), (JOB + "add", {"a": 1}, None)])
    assert count(app) == 0


def test_cancel_retry_and_their_errors(app: App) -> None:
    job_id = app.enqueue(JOB + "add", {"a": 1, "b": 2})
    assert app.cancel(job_id) == JobState.CANCELLED
    with pytest.raises(InvalidState):
        app.cancel(job_id)
    app.retry(job_id)
    info = app.get(job_id)
    assert info.state == JobState.PENDING and info.attempts == 0
    with pytest.raises(InvalidState):
        app.retry(job_id)
    with pytest.raises(JobNotFound):
        app.get(10**9)
    with pytest.raises(JobNotFound):
        app.cancel(10**9)


def test_jobs_listing_and_stats(app: App) -> None:
    for i in range(3):
        app.enqueue(JOB + "add", {"a": i, "b": i}, queue="bulk")
    app.enqueue(JOB + "add", {"a": 0, "b": 0})
    listed = app.jobs(queue="bulk")
    assert [j.id for j in listed] == sorted((j.id for j in listed), reverse=True)
    assert len(listed) == 3 and len(app.jobs(limit=2)) == 2
    app.clock.advance(5)  # type: ignore[attr-defined]
    stats = app.stats()
    assert stats["bulk"].pending == 3 and stats["default"].pending == 1
    assert (stats["bulk"].oldest_pending_age or 0) >= 5
    app.pause("bulk")
    assert app.stats()["bulk"].paused
    app.resume("bulk")
    assert not app.stats()["bulk"].paused


def test_run_inline_needs_no_database() -> None:
    offline = basic.app.using("sqlite:////nonexistent/dir/never.db")
    assert offline.run_inline(basic.add, a=2, b=3) == 5
    assert offline.run_inline(JOB + "typed", when="2024-01-01T00:00:00Z") == (
        "2024-01-01T00:00:00+00:00 x1"
    )
    with pytest.raises(EnqueueError):
        offline.run_inline(basic.add, a=1)
    with pytest.raises(RuntimeError, match="failing attempt 1"):
        offline.run_inline(basic.fail_then_succeed, times=1)


def test_job_options_are_validated_at_registration() -> None:
    from procqueue import ConfigError

    scratch = App("sqlite:///unused.db")
    with pytest.raises(ConfigError, match="unknown option 'colour'"):
        scratch.job(colour="red")(lambda: None)
    with pytest.raises(ConfigError, match="timeout"):
        scratch.job(timeout=-1)(lambda: None)
    with pytest.raises(ConfigError, match="rate_limit: a rate is"):
        scratch.job(rate_limit="100 per minute")(lambda: None)
    with pytest.raises(ConfigError, match="unknown option 'debounce'"):
        scratch.job(debounce=5)(lambda: None)  # an enqueue's option, not a job's
    limited = scratch.job(rate_limit="100/m", group_limit=2, name="limited")(lambda: None)
    assert (limited.options.rate_limit, limited.options.group_limit) == ("100/m", 2)
    job = scratch.job(backoff=Backoff(base=2), name="custom")(lambda: None)
    assert job.name == "custom" and job.options.backoff.base == 2


class SteppedClock:
    """Real wall time; monotonic time that moves only when `sleep` is called."""

    def __init__(self) -> None:
        self.wall = ManualClock()
        self.elapsed = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.wall.now()

    def monotonic(self) -> float:
        return self.elapsed

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.elapsed += seconds


def test_wait_measures_and_sleeps_on_the_apps_clock(dsn: str) -> None:
    clock = SteppedClock()
    app = basic.app.using(dsn, clock=clock)
    try:
        job_id = app.enqueue(JOB + "add", {"a": 1, "b": 2})
        with pytest.raises(TimeoutError, match="still pending after 30"):
            app.wait(job_id, timeout=30)
        assert sum(clock.sleeps) == pytest.approx(30)  # never past the timeout
        assert max(clock.sleeps) <= 0.1  # backs off to a short poll
        app.cancel(job_id)
        assert app.wait(job_id, timeout=0).state == JobState.CANCELLED
    finally:
        app.close()


def test_enqueue_hooks_are_called_until_unsubscribed(app: App) -> None:
    calls: list[str] = []

    def hook() -> None:
        calls.append("woke")

    app.off_enqueue(hook)  # not subscribed: nothing happens
    app.on_enqueue(hook)
    job_id = app.enqueue(JOB + "add", {"a": 1, "b": 2})
    app.enqueue_many([(JOB + "add", {"a": 1, "b": 1}, None)])
    app.cancel(job_id)
    app.retry(job_id)
    assert calls == ["woke"] * 3  # enqueue, enqueue_many, retry; not cancel
    app.off_enqueue(hook)
    app.off_enqueue(hook)
    app.enqueue(JOB + "add", {"a": 1, "b": 2})
    assert calls == ["woke"] * 3


def test_the_registry_is_shared_by_using_and_needs_no_database() -> None:
    other = basic.app.using("sqlite:////nonexistent/dir/never.db")
    assert other.registry is basic.app.registry and other.schedules is basic.app.schedules
    assert other.registry[JOB + "add"] is basic.add and JOB + "nope" not in other.registry
    prepared = other.registry.prepare(JOB + "add", {"a": 1, "b": 2}, {"delay": 5}, now=100.0)
    assert (prepared.name, prepared.args, prepared.run_at) == (JOB + "add", b'{"a":1,"b":2}', 105.0)


def test_positional_arguments_are_bound_to_the_parameters(dsn: str) -> None:
    """``add.enqueue(4, 4)``, as Celery's ``add.delay(4, 4)``."""
    own = App(dsn)

    @own.job
    def add(a: int, b: int) -> int:
        return a + b

    try:
        ids = [add.enqueue(4, 4), add.enqueue(4, b=5), add.configure(priority=3).enqueue(1, 2)]
        got = [own.get(i).args for i in ids]
        assert got == [{"a": 4, "b": 4}, {"a": 4, "b": 5}, {"a": 1, "b": 2}]
        for args, kwargs, words in [((1, 2, 3), {}, "too many"), ((1,), {"a": 2}, "multiple")]:
            with pytest.raises(EnqueueError, match=words):
                add.enqueue(*args, **kwargs)
        assert len(own.jobs()) == 3
    finally:
        own.close()
