"""A row is untrusted data, on both backends: rows corrupted with raw SQL
never crash a read (they are listed with placeholders and say which column
is wrong), never reach a supervisor through a claim (the job fails there,
the others are claimed), and a result or step that is not UTF-8 JSON is
refused with `StoreRejected` before anything is written.

SQLite is loosely typed, so text and blobs go into any column; PostgreSQL
keeps its column types, so there the JSON shapes are wrong.
"""

from __future__ import annotations

from typing import Any

import hypothesis
import msgspec
import pytest
from hypothesis import strategies as st

from procqueue import errors, models
from procqueue.models import JobState
from procqueue.store.base import Store
from tests.store.factories import BASE, claim, claim_exactly, get, insert_one
from tests.store.rawdb import RawDb

# Per backend: (column, SQL expression written into it, what `undecodable` says about it)
BAD_PUBLIC: dict[str, list[tuple[str, str, str]]] = {
    "sqlite": [
        ("args", "'{not json'", "column args: invalid JSON"),
        ("args", "'[1, 2]'", "column args: expected a JSON object, got list"),
        ("args", "x'7b7d'", "column args: expected JSON text, got 2 bytes"),
        ("result", "'nope'", "column result: invalid JSON"),
        ("tags", "'{\"a\": 1}'", "column tags: expected a JSON list of strings"),
        ("state", "'zombie'", "column state: unknown state: text 'zombie'"),
        ("run_at", "1e300", "column run_at: time 1e+300 is out of range"),
        ("created_at", "'yesterday'", "column created_at: expected a finite number, got text"),
        ("finished_at", "x'00'", "column finished_at: expected a finite number, got 1 bytes"),
        ("progress", "x'00ff'", "column progress: expected text, got 2 bytes"),
        ("attempts", "'many'", "column attempts: expected an integer, got text 'many'"),
        ("priority", "2.5", "column priority: expected an integer, got float 2.5"),
        ("pid", "'init'", "column pid: expected an integer"),
        ("fraction", "'half'", "column fraction: expected a finite number"),
        ("name", "x'6a'", "column name: expected text, got 1 bytes"),
        ("error", "x'41'", "column error: expected text, got 1 bytes"),
    ],
    "postgres": [
        ("args", "'1'::json", "column args: expected a JSON object, got int"),
        ("args", "'[]'::json", "column args: expected a JSON object, got list"),
        ("tags", "'{\"a\": 1}'::jsonb", "column tags: expected a JSON list of strings"),
        ("tags", "'[1]'::jsonb", "column tags: expected a JSON list of strings"),
        ("state", "'zombie'", "column state: unknown state: text 'zombie'"),
        ("run_at", "1e300", "column run_at: time 1e+300 is out of range"),
        ("created_at", "'NaN'::float8", "column created_at: expected a finite number"),
        ("started_at", "'-Infinity'::float8", "column started_at: expected a finite number"),
    ],
}

# Per backend: a column a claim needs, corrupted: (column, SQL expression, what the error says)
BAD_CLAIMED: dict[str, list[tuple[str, str, str]]] = {
    "sqlite": [
        ("backoff", "'{bad'", "column backoff: invalid JSON"),
        ("backoff", "'{\"base\": -1}'", "column backoff: unexpected JSON (Backoff needs"),
        ("timeout", "'soon'", "column timeout: expected a finite number, got text 'soon'"),
        ("max_memory", "'lots'", "column max_memory: expected an integer, got text 'lots'"),
        ("max_attempts", "'x'", "column max_attempts: expected an integer, got text 'x'"),
        ("args", "x'7b7d'", "column args: expected JSON text, got 2 bytes"),
        ("args", "'[1]'", "column args: expected a JSON object, got list"),
        ("serial_key", "x'01'", "column serial_key: expected text, got 1 bytes"),
        ("attempts", "9223372036854775807", "column attempts: no attempt left"),
        ("attempts", "3", "column attempts: no attempt left"),
    ],
    "postgres": [
        ("backoff", "'\"x\"'::jsonb", "column backoff: unexpected JSON (Expected `object`"),
        ("backoff", '\'{"base": "slow"}\'::jsonb', "column backoff: unexpected JSON"),
        ("args", "'1'::json", "column args: expected a JSON object, got int"),
        ("timeout", "'Infinity'::float8", "column timeout: expected a finite number"),
        ("attempts", "2147483647", "column attempts: no attempt left"),
        ("max_attempts", "-5", "column attempts: no attempt left"),
    ],
}


def _cases(table: dict[str, list[tuple[str, str, str]]]) -> list[Any]:
    return [
        pytest.param(backend, *case, id=f"{backend}-{case[0]}-{n}")
        for backend, cases in table.items()
        for n, case in enumerate(cases)
    ]


def _corrupt(raw: RawDb, id_: int, column: str, expression: str) -> None:
    # The column and the expression are the test's own constants.
    raw.execute(f"UPDATE jobs SET {column} = {expression} WHERE id = ?", (id_,))


# -- reading a job ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "column", "expression", "says"), _cases(BAD_PUBLIC), indirect=["dsn"]
)
def test_a_corrupted_row_is_listed_with_placeholders_naming_the_column(
    store: Store, raw: RawDb, column: str, expression: str, says: str
) -> None:
    good = insert_one(store, args={"n": 1}, tags=["a"])
    bad = insert_one(store, args={"n": 2}, tags=["b"])
    finished = store.job_cancel(id=bad, now=BASE + 1)  # so started/finished_at exist to corrupt
    assert finished == JobState.CANCELLED
    raw.execute("UPDATE jobs SET started_at = ? WHERE id = ?", (BASE, bad))
    _corrupt(raw, bad, column, expression)

    info = get(store, bad)
    assert info.undecodable is not None and info.undecodable.startswith(says), info.undecodable
    assert "; " not in info.undecodable  # only that column
    assert info.id == bad
    fields = msgspec.structs.asdict(info)
    assert fields[column] in (None, 0, "", {}, [], JobState.FAILED, models.to_datetime(0.0))
    msgspec.json.encode(info)  # and it can be shown
    listed = store.job_list(state=None, queue=None, name=None, limit=10)
    assert [j.id for j in listed] == [bad, good]
    assert listed[0] == info
    assert listed[1] == get(store, good) and listed[1].undecodable is None
    assert listed[1].args == {"n": 1}


def test_every_bad_column_of_a_row_is_named(store: Store, raw: RawDb) -> None:
    id_ = insert_one(store)
    bad_args, bad_state = ("'1'::json", "'zombie'") if raw.backend == "postgres" else ("'x'", "7")
    _corrupt(raw, id_, "args", bad_args)
    _corrupt(raw, id_, "state", bad_state)
    info = get(store, id_)
    assert info.undecodable is not None
    assert [p.split(":")[0] for p in info.undecodable.split("; ")] == [
        "column state",
        "column args",
    ]
    assert info.state == JobState.FAILED and info.args == {}


_SQLITE_VALUES = st.one_of(
    st.text(max_size=30),
    st.binary(max_size=30),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),  # SQLite stores NaN as NULL
)
_CHARS = st.characters(
    blacklist_characters="\x00", blacklist_categories=("Cs",)
)  # jsonb refuses NUL
_COLUMNS = [
    f
    for f in models.JobInfo.__struct_fields__
    if f not in ("id", "undecodable", "orphaned", "history")  # computed, not columns
]


@hypothesis.settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
@hypothesis.given(values=st.dictionaries(st.sampled_from(_COLUMNS), _SQLITE_VALUES, max_size=4))
@pytest.mark.parametrize("dsn", ["sqlite"], indirect=True)  # SQLite takes any value anywhere
def test_any_values_in_any_sqlite_columns_never_break_a_read(
    store: Store, raw: RawDb, values: dict[str, Any]
) -> None:
    raw.execute("DELETE FROM jobs")  # what an earlier example left
    id_ = insert_one(store)
    for column, value in values.items():
        raw.execute(f"UPDATE jobs SET {column} = ? WHERE id = ?", (value, id_))
    info = get(store, id_)
    msgspec.json.encode(info)
    assert [j.id for j in store.job_list(state=None, queue=None, name=None, limit=1)] == [id_]
    store.queue_list(now=BASE)
    for claimed in claim(store, count=5, queues=None, now=BASE + 10**12):
        assert claimed.id == id_


@hypothesis.settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
@hypothesis.given(
    column=st.sampled_from(["args", "result", "tags", "backoff"]),
    value=st.recursive(
        st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(_CHARS, max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(_CHARS, max_size=5), inner)
        ),
        max_leaves=6,
    ),
)
def test_any_json_in_the_json_columns_never_breaks_a_read_or_a_claim(
    store: Store, raw: RawDb, column: str, value: Any
) -> None:
    raw.execute("DELETE FROM jobs")  # what an earlier example left
    id_ = insert_one(store)
    text = msgspec.json.encode(value).decode()
    cast = "::jsonb" if raw.backend == "postgres" and column in ("tags", "backoff") else ""
    cast = cast or ("::json" if raw.backend == "postgres" else "")
    raw.execute(f"UPDATE jobs SET {column} = ?{cast} WHERE id = ?", (text, id_))
    info = get(store, id_)
    msgspec.json.encode(info)
    claimed = claim(store, count=2, now=BASE)
    after = get(store, id_)
    if claimed:
        assert [c.id for c in claimed] == [id_] and after.state == JobState.RUNNING
    else:
        assert after.state == JobState.FAILED
        assert after.error is not None and after.error.startswith("the job's row cannot be")


# -- claiming -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "column", "expression", "says"), _cases(BAD_CLAIMED), indirect=["dsn"]
)
def test_a_claim_fails_a_job_whose_row_does_not_decode_and_takes_the_others(
    store: Store, raw: RawDb, column: str, expression: str, says: str
) -> None:
    first, bad, last = (insert_one(store, args={"n": n}, priority=-n) for n in range(3))
    _corrupt(raw, bad, column, expression)
    claimed = claim(store, count=3, now=BASE + 5)
    assert [c.id for c in claimed] == [first, last]
    assert [msgspec.json.decode(c.args) for c in claimed] == [{"n": 0}, {"n": 2}]
    info = get(store, bad)
    assert info.state == JobState.FAILED
    assert info.error is not None
    assert info.error.startswith(f"the job's row cannot be decoded: {says}"), info.error
    assert info.finished_at == models.to_datetime(BASE + 5)
    assert running(store) == {first, last}
    assert claim(store, count=3, now=BASE + 6) == []  # and it is not taken again


BAD_STEPS: dict[str, list[tuple[str, str]]] = {
    "sqlite": [("'broken'", "'{not json'"), ("x'01'", "'1'"), ("'blob'", "x'7b7d'")],
    "postgres": [],  # a jsonb value is JSON and a text name is text
}


@pytest.mark.parametrize(
    ("dsn", "name", "value"),
    [
        pytest.param(b, *case, id=f"{b}-{n}")
        for b, cases in BAD_STEPS.items()
        for n, case in enumerate(cases)
    ],
    indirect=["dsn"],
)
def test_a_step_row_that_does_not_decode_is_left_out_and_runs_again(
    store: Store, raw: RawDb, name: str, value: str
) -> None:
    id_ = insert_one(store)
    first = claim_exactly(store, id_)
    assert store.job_save_step(id=id_, attempt=first.attempt, name="kept", value=b"[1]")
    raw.execute(f"INSERT INTO job_steps (job_id, name, value) VALUES (?, {name}, {value})", (id_,))
    raw.execute("UPDATE jobs SET state = 'pending', owner = NULL WHERE id = ?", (id_,))
    again = claim_exactly(store, id_, now=BASE + 1)
    assert {k: msgspec.json.decode(v) for k, v in again.steps.items()} == {"kept": [1]}


def running(store: Store) -> set[int]:
    return {j.id for j in store.job_list(state="running", queue=None, name=None, limit=100)}


# -- values going in ------------------------------------------------------------------------

NOT_UTF8_OR_JSON = [
    pytest.param(b"\xff\xfe", "not valid UTF-8", id="not-utf8"),
    pytest.param(b'"\xc3"', "not valid UTF-8", id="truncated-utf8"),
    pytest.param(b"{nope", "not valid JSON", id="not-json"),
    pytest.param(b"", "not valid JSON", id="empty"),
    pytest.param(b"1 2", "not valid JSON", id="two-values"),
    pytest.param(b"[" * 990 + b"]" * 990, "nested deeper than 512 levels", id="too-deep"),
]


@pytest.mark.parametrize(("value", "says"), NOT_UTF8_OR_JSON)
def test_a_result_that_is_not_utf8_json_is_refused_and_nothing_is_written(
    store: Store, value: bytes, says: str
) -> None:
    other = claim_exactly(store, insert_one(store, queue="other"), owner="o")
    claimed = claim_exactly(store, insert_one(store))
    bad = models.Outcome(id=claimed.id, attempt=claimed.attempt, state=JobState.DONE, result=value)
    fine = models.Outcome(id=other.id, attempt=other.attempt, state=JobState.DONE, result=b"1")
    with pytest.raises(errors.StoreRejected, match=f"job {claimed.id}'s result is {says}"):
        store.job_record_many(outcomes=[fine, bad], now=BASE)
    with pytest.raises(errors.StoreRejected, match=says):
        store.job_record_and_claim(
            outcomes=[bad], owner="o", queues=None, count=1, lease_until=BASE + 30, now=BASE
        )
    assert running(store) == {claimed.id, other.id}  # the batch wrote nothing
    assert store.job_record_many(outcomes=[fine], now=BASE) == []


@pytest.mark.parametrize(("value", "says"), NOT_UTF8_OR_JSON)
def test_a_step_value_that_is_not_utf8_json_is_refused(
    store: Store, value: bytes, says: str
) -> None:
    claimed = claim_exactly(store, insert_one(store))
    with pytest.raises(errors.StoreRejected, match=f"the value of step 's' is {says}"):
        store.job_save_step(id=claimed.id, attempt=claimed.attempt, name="s", value=value)
    assert store.job_save_step(id=claimed.id, attempt=claimed.attempt, name="s", value=b"[1]")


# -- leases that are no time ------------------------------------------------------------------

BAD_LEASES = {
    "sqlite": ["NULL", "'soon'", "x'00'"],
    "postgres": ["NULL", "'NaN'::float8"],
}


@pytest.mark.parametrize(
    ("dsn", "expression"),
    [pytest.param(b, e, id=f"{b}-{e}") for b, cases in BAD_LEASES.items() for e in cases],
    indirect=["dsn"],
)
def test_a_running_row_whose_lease_is_no_time_is_rescued(
    store: Store, raw: RawDb, expression: str
) -> None:
    """Else it would stay running forever and count against its queue's limit."""
    id_ = insert_one(store)
    claim(store, count=1, now=BASE)
    _corrupt(raw, id_, "lease_until", expression)
    assert store.job_rescue_expired(now=BASE + 1) == 1
    assert get(store, id_).state == JobState.PENDING
    assert running(store) == set()
