"""Values that would park or break a job are refused at the call with
`EnqueueError`, the same on both backends, and nothing is written: numbers
that are not finite, integers outside PostgreSQL's ``integer`` range (so
SQLite refuses them too), NUL characters in any text option."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from procqueue import App, Backoff, EnqueueError
from tests.jobs import hostile_values

H = "tests.jobs.hostile_values."
INF, NAN = float("inf"), float("nan")

BAD_OPTIONS: dict[str, dict[str, Any]] = {
    "delay=inf": {"delay": INF},
    "delay=nan": {"delay": NAN},
    "delay=-inf": {"delay": -INF},
    "timeout=inf": {"timeout": INF},
    "timeout=nan": {"timeout": NAN},
    "deadline=inf": {"deadline": INF},
    "deadline=nan": {"deadline": NAN},
    "backoff base=nan": {"backoff": {"base": NAN}},
    "backoff factor=inf": {"backoff": {"factor": INF}},
    "backoff base<0": {"backoff": {"base": -1}},
    "priority=2**31": {"priority": 2**31},
    "priority=-2**31-1": {"priority": -(2**31) - 1},
    "priority=2**63": {"priority": 2**63},
    "priority=-2**63": {"priority": -(2**63)},
    "priority=nan": {"priority": NAN},
    "max_attempts=2**31": {"max_attempts": 2**31},
    "max_attempts=2**63": {"max_attempts": 2**63},
    "max_memory=2**31": {"max_memory": 2**31},
    "max_memory=-2**31": {"max_memory": -(2**31)},
    "max_snoozes=2**31": {"max_snoozes": 2**31},
    "key NUL": {"key": "a\x00b"},
    "serial_key NUL": {"serial_key": "a\x00b"},
    "queue NUL": {"queue": "q\x00"},
    "tags NUL": {"tags": ["ok", "t\x00"]},
}


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = hostile_values.app.using(dsn)
    yield a
    a.close()


@pytest.mark.parametrize("options", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_a_value_that_would_park_or_break_a_job_is_refused(
    app: App, options: dict[str, Any]
) -> None:
    with pytest.raises(EnqueueError) as by_name:
        app.enqueue(H + "echo", {"value": 1}, **options)
    with pytest.raises(EnqueueError) as registered:
        hostile_values.echo.configure(**options).enqueue(value=1)
    with pytest.raises(EnqueueError):
        app.enqueue("not.imported.anywhere", {"value": 1}, **options)
    for exc in (by_name.value, registered.value):
        assert "\n" not in str(exc) and str(exc), exc
    assert app.jobs() == []


def test_a_backoff_object_that_is_not_a_number_cannot_be_made() -> None:
    for bad in ({"base": NAN}, {"factor": INF}, {"max": -1.0}):
        with pytest.raises(ValueError, match="Backoff needs"):
            Backoff(**bad)


@pytest.mark.parametrize("name", ["a\x00b", H + "echo\x00"])
def test_a_job_name_with_nul_is_refused(app: App, name: str) -> None:
    with pytest.raises(EnqueueError, match=r"NUL|name"):
        app.enqueue(name, {})
    assert app.jobs() == []


@pytest.mark.parametrize("value", [2**31 - 1, -(2**31)])
def test_the_ends_of_the_integer_range_are_accepted(app: App, value: int) -> None:
    job_id = app.enqueue(H + "echo", {"value": 1}, priority=value)
    assert app.get(job_id).priority == value
