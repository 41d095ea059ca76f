"""Adversarial input, through real supervisors and real children.

- Argument values (random and extreme) are encoded and come back unchanged
  from a child, or are refused at enqueue with EnqueueError; the supervisor
  never falls over.
- Frames on the pipe that are malformed, truncated or oversized are refused
  by whichever side reads them, and the attempt fails saying "protocol".
- Command lines and DSNs, fuzzed, end with exit 1 or 2 and one line on
  stderr, never a traceback.

Known bugs are kept as ``xfail(strict=True)`` tests naming them.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from procqueue import EnqueueError, JobInfo, JobState, ProtocolError, protocol
from procqueue.cli import main as cli
from procqueue.testing import wait_until
from tests.chaos import cluster
from tests.chaos.hostile import app as hostile_app

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests.chaos.hostile"
H = "tests.chaos.hostile."
TERMINAL = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)
MAX_DEPTH_ACCEPTED = 500
"""Nesting that must round-trip; much deeper must be refused."""


# -- a real supervisor of the hostile jobs ---------------------------------------


class Cluster:
    """One database and a ``procqueue supervise`` process of the hostile jobs,
    restarted if a test killed it."""

    def __init__(self, backend: str, folder: Path, workers: int = 2, lease: float = 30) -> None:
        self.backend = backend
        self.folder = folder
        self.workers = workers
        self.lease = lease
        self.db = cluster.Database.create(backend, folder)
        self.app = hostile_app.using(self.db.dsn)
        self.app.store.migrate(now=self.app.clock.now())
        self.sup: cluster.SupervisorProcess | None = None
        self.starts = 0

    def ensure(self) -> cluster.SupervisorProcess:
        if self.sup is None or self.sup.poll() is not None:
            self.starts += 1
            self.sup = cluster.start_supervisor(
                self.db.dsn,
                spec=SPEC,
                log_path=self.folder / f"sup{self.starts}.log",
                workers=self.workers,
                # the default lease: on SQLite each write to a 50 MB job's row
                # (claim, pid, renewal, outcome) rewrites all of it, seconds on a
                # busy machine, and these tests are about sizes, not lease margins
                lease=self.lease,
                poll=0.05,
            )
        return self.sup

    def run(self, name: str, args: dict[str, Any], timeout: float = 30) -> JobInfo:
        self.ensure()
        return self.app.wait(self.app.enqueue(H + name, args), timeout=timeout)

    def alive(self) -> bool:
        return self.sup is not None and self.sup.poll() is None

    def close(self) -> None:
        if self.sup is not None and self.sup.poll() is None:
            self.sup.terminate()
            if self.sup.wait(timeout=45) is None:
                self.sup.kill()
                self.sup.wait(timeout=10)
        self.app.close()
        self.db.drop()


def need_postgres() -> None:
    reason = cluster.postgres_reason()
    if reason is None:
        return
    if os.environ.get("PROCQUEUE_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL required but unreachable: {reason}")
    pytest.skip(f"no PostgreSQL at {cluster.PG_URL}: {reason}")


@contextlib.contextmanager
def fresh_cluster(
    backend: str, folder: Path, workers: int = 2, lease: float = 30
) -> Iterator[Cluster]:
    if backend == "postgres":
        need_postgres()
    c = Cluster(backend, folder, workers, lease)
    try:
        yield c
    finally:
        if c.sup is not None and c.sup.poll() is None:
            c.sup.kill()  # a wedged supervisor may not drain: this one is disposable
            c.sup.wait(timeout=10)
        c.close()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def echo_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A supervisor shared by this module's tests of a backend."""
    if request.param == "postgres":
        need_postgres()
    c = Cluster(request.param, tmp_path_factory.mktemp(f"adversarial-{request.param}"))
    c.ensure()
    yield c
    assert c.alive(), "the supervisor died: " + (c.sup.log_tail() if c.sup else "")
    assert c.starts == 1, f"the supervisor was restarted {c.starts - 1} times"
    c.close()


@pytest.fixture(scope="module")
def pipe_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster("sqlite", tmp_path_factory.mktemp("adversarial-pipe"))
    c.ensure()
    yield c
    assert c.alive(), "the supervisor died: " + (c.sup.log_tail() if c.sup else "")
    assert c.starts == 1, f"the supervisor was restarted {c.starts - 1} times"
    c.close()


# -- argument values -----------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down; floats bit for bit (-0.0 is not 0.0)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, float):
            if not (
                (math.isnan(x) and math.isnan(y))
                or (x == y and math.copysign(1.0, x) == math.copysign(1.0, y))
            ):
                return False
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif isinstance(x, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif x != y:
            return False
    return True


def carriable(value: Any) -> bool:
    """Whether JSON can carry `value` exactly: no NaN/infinity, no lone
    surrogate, no integer past Python's 4300-digit str() limit."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**4300:
            return False
        if isinstance(v, str):
            try:
                v.encode()
            except UnicodeEncodeError:
                return False
        if isinstance(v, list):
            stack.extend(v)
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return True


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats()
    | st.text()
    | st.text(alphabet=st.characters(categories=["Cs", "Cc", "Zl", "Zs", "So"]), max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=25,
)


def check_round_trip(c: Cluster, value: Any) -> None:
    """`value` comes back unchanged from a child, or is refused with EnqueueError."""
    try:
        job_id = c.app.enqueue(H + "echo", {"value": value})
    except EnqueueError as exc:
        assert not carriable(value), f"refused a value JSON can carry: {exc}"
        return
    assert carriable(value), f"accepted {value!r}, which JSON cannot carry"
    info = c.app.wait(job_id, timeout=30)
    assert info.state == JobState.DONE, info.error
    assert same(info.args["value"], value), (info.args["value"], value)
    assert same(info.result, value), (info.result, value)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(value=json_values)
@example(value=2**64 + 1)
@example(value=-(2**200))
@example(value=10**4299)
@example(value=float("nan"))
@example(value={"a": [1.5, float("-inf")]})
@example(value="\ud800")
@example(value={"\udfff": 1})
@example(value="\u2028\u2029\ufeff\U0001f600")
@example(value=5e-324)
@example(value=[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]])
@example(value={"": None, " ": {"": []}})
def test_random_arguments_round_trip_through_a_real_child_or_are_refused(
    echo_cluster: Cluster, value: Any
) -> None:
    check_round_trip(echo_cluster, value)
    assert echo_cluster.alive()


def test_nesting_500_deep_round_trips(echo_cluster: Cluster) -> None:
    value: Any = "leaf"
    for i in range(MAX_DEPTH_ACCEPTED):
        value = [value] if i % 2 else {"k": value}
    check_round_trip(echo_cluster, value)


def test_a_50_mb_argument_reaches_the_job_and_a_50_mb_result_fails_clearly(
    echo_cluster: Cluster,
) -> None:
    value = "ü" + "x" * (50 * 1024 * 1024 - 2) + "€"
    echo_cluster.ensure()
    job_id = echo_cluster.app.enqueue(H + "echo", {"value": value})
    # poll the state alone: every app.get would decode 100 MB of JSON
    query = "SELECT state FROM jobs WHERE id = ?"
    wait_until(
        lambda: echo_cluster.db.query(query, (job_id,))[0][0] not in ("pending", "running"),
        timeout=120,
        interval=0.1,
        what="the 50 MB echo",
    )
    info = echo_cluster.app.get(job_id)
    # the child refuses a result past the reply cap itself: the supervisor never buffers it
    assert info.state == JobState.FAILED
    assert f"the limit is {protocol.MAX_REPLY - 4096}" in (info.error or "")
    assert info.args["value"] == value
    assert echo_cluster.alive()


def test_a_7_mb_result_round_trips(echo_cluster: Cluster) -> None:
    value = "ü" + "x" * (7 * 1024 * 1024) + "€"
    check_round_trip(echo_cluster, value)


def test_arguments_past_64_mb_are_refused_at_enqueue(echo_cluster: Cluster) -> None:
    before = len(echo_cluster.app.jobs(limit=10_000))
    with pytest.raises(EnqueueError, match="limit"):
        echo_cluster.app.enqueue(H + "echo", {"value": "x" * (64 * 1024 * 1024)})
    assert len(echo_cluster.app.jobs(limit=10_000)) == before


@pytest.mark.parametrize("kind", ["nested 5000 deep", "an int of 5000 digits"])
def test_values_msgspec_cannot_encode_are_refused_with_enqueue_error(
    kind: str, tmp_path: Path
) -> None:
    value: Any = 10**5000 if kind.startswith("an int") else []
    if kind.startswith("nested"):
        for _ in range(5000):
            value = [value]
    app = hostile_app.using(f"sqlite:///{tmp_path}/q.db")
    try:
        with pytest.raises(EnqueueError):
            app.enqueue(H + "echo", {"value": value})
    finally:
        app.close()


def test_postgres_returns_floats_unchanged(tmp_path: Path) -> None:
    with fresh_cluster("postgres", tmp_path) as c:
        for value in (1e16, 1e300, -0.0):
            info = c.run("echo", {"value": value})
            assert same(info.result, value), (value, info.result)
            assert same(info.args["value"], value), (value, info.args["value"])


def test_postgres_a_nul_character_round_trips_or_is_refused_with_enqueue_error(
    tmp_path: Path,
) -> None:
    need_postgres()
    db = cluster.Database.create("postgres", tmp_path)
    app = hostile_app.using(db.dsn)
    try:
        try:
            job_id = app.enqueue(H + "echo", {"value": "a\x00b"})
        except EnqueueError:
            return
        assert app.get(job_id).args == {"value": "a\x00b"}
    finally:
        app.close()
        db.drop()


@pytest.mark.timeout(90)
def test_postgres_a_nul_in_a_result_does_not_wedge_the_supervisor(tmp_path: Path) -> None:
    with fresh_cluster("postgres", tmp_path) as c:
        c.ensure()
        bad = c.app.enqueue(H + "bad_result", {"kind": "nul"})
        with contextlib.suppress(TimeoutError):
            c.app.wait(bad, timeout=3)
        after = c.app.enqueue(H + "echo", {"value": "after"})
        info = c.app.wait(after, timeout=10)  # TimeoutError: still pending
        assert info.result == "after"
        assert c.app.get(bad).state in (JobState.DONE, JobState.FAILED)


@pytest.mark.parametrize("kind", ["surrogate", "deep"])
def test_a_result_json_cannot_carry_fails_saying_so(pipe_cluster: Cluster, kind: str) -> None:
    info = pipe_cluster.run("bad_result", {"kind": kind})
    assert pipe_cluster.alive()
    assert info.state == JobState.FAILED
    assert "cannot be encoded" in (info.error or ""), info.error


def test_a_nan_result_is_not_silently_recorded_as_null(pipe_cluster: Cluster) -> None:
    info = pipe_cluster.run("bad_result", {"kind": "nan"})
    assert pipe_cluster.alive()
    assert not (info.state == JobState.DONE and info.result is None), info


# -- frames, in memory and on a pipe --------------------------------------------------

texts = st.text(max_size=20)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
to_supervisor = st.one_of(
    st.builds(protocol.Hello, pid=ints, version=ints, error=st.none() | texts),
    st.builds(
        protocol.Progress,
        job_id=ints,
        text=st.none() | texts,
        fraction=st.none() | st.floats(allow_nan=False),
    ),
    st.builds(protocol.Step, job_id=ints, name=texts, value=st.binary(max_size=50)),
    st.builds(protocol.Done, job_id=ints, result=st.binary(max_size=50)),
    st.builds(
        protocol.Failed,
        job_id=ints,
        kind=texts,
        error=texts,
        delay=st.none() | st.floats(allow_nan=False),
    ),
)
to_child = st.one_of(
    st.builds(
        protocol.Run,
        job_id=ints,
        attempt=ints,
        name=texts,
        args=st.binary(max_size=50),
        steps=st.dictionaries(texts, st.binary(max_size=20), max_size=3),
    ),
    st.builds(protocol.StepSaved, job_id=ints, name=texts),
    st.builds(protocol.Shutdown),
)


TO_CHILD = (protocol.Run, protocol.StepSaved, protocol.Shutdown)
TO_SUPERVISOR = (protocol.Hello, protocol.Progress, protocol.Step, protocol.Done, protocol.Failed)


def feed_in_chunks(
    data: bytes, cuts: list[int], *, to_child: bool
) -> tuple[list[protocol.Message], int] | str:
    """The messages a FrameReader makes of `data` split at `cuts`, and the bytes
    it holds back; or the ProtocolError's text."""
    reader = protocol.FrameReader(to_child=to_child)
    out: list[protocol.Message] = []
    bounds = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    try:
        for a, b in itertools.pairwise(bounds):
            out.extend(reader.feed(data[a:b]))
    except ProtocolError as exc:
        return str(exc)
    return out, reader.pending()


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=300)
    | st.builds(
        lambda n, body: n.to_bytes(4, "big") + body,
        st.integers(0, 2**32 - 1),
        st.binary(max_size=60),
    ),
    cuts=st.lists(st.integers(min_value=0), max_size=6),
    to_child=st.booleans(),
)
@example(data=b"\xff\xff\xff\xff", cuts=[], to_child=False)
@example(data=b"\x00\x00\x00\x00", cuts=[], to_child=True)
@example(data=b"\x00\x00\x00\x01\xc1", cuts=[], to_child=False)
def test_the_frame_reader_yields_valid_messages_or_a_protocol_error_however_bytes_arrive(
    data: bytes, cuts: list[int], to_child: bool
) -> None:
    got = feed_in_chunks(data, [], to_child=to_child)  # nothing but ProtocolError escapes
    assert encoded(feed_in_chunks(data, cuts, to_child=to_child)) == encoded(got)
    if isinstance(got, tuple):
        kinds = TO_CHILD if to_child else TO_SUPERVISOR
        assert all(isinstance(m, kinds) for m in got[0])
        assert got[1] <= len(data)


@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(to_supervisor, min_size=1, max_size=5)
    | st.lists(to_child, min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    cut_short=st.integers(min_value=1),
)
def test_frames_round_trip_in_any_chunking_and_a_truncated_one_is_noticed(
    messages: list[protocol.Message], cuts: list[int], cut_short: int
) -> None:
    to_child_side = isinstance(messages[0], TO_CHILD)
    data = b"".join(protocol.encode(m) for m in messages)
    assert feed_in_chunks(data, cuts, to_child=to_child_side) == (messages, 0)
    ends = list(itertools.accumulate(len(protocol.encode(m)) for m in messages))
    keep = 1 + cut_short % (len(data) - 1)  # at least one byte kept, at least one cut
    got = feed_in_chunks(data[:keep], cuts, to_child=to_child_side)
    whole = [m for m, end in zip(messages, ends, strict=True) if end <= keep]
    assert isinstance(got, tuple) and got[0] == whole
    if keep in ends:
        assert got[1] == 0
    else:
        assert got[1] > 0  # bytes held back: EOF here is a truncated frame


def encoded(
    got: tuple[list[protocol.Message], int] | str,
) -> tuple[list[bytes], int] | str:
    """Comparable form (NaN inside a message is not equal to itself; its bytes are)."""
    return got if isinstance(got, str) else ([protocol.encode(m) for m in got[0]], got[1])


def read_all_from_pipe(data: bytes, *, to_child: bool) -> list[protocol.Message] | str:
    r, w = os.pipe()

    def write() -> None:
        try:
            protocol.write_all(w, data)
        finally:
            os.close(w)

    writer = threading.Thread(target=write)
    writer.start()
    out: list[protocol.Message] = []
    try:
        while True:
            message = protocol.read_message(r, to_child=to_child)
            if message is None:
                return out
            out.append(message)
    except ProtocolError as exc:
        return str(exc)
    finally:
        # drain so the writer can finish, then close
        with contextlib.suppress(OSError):
            while os.read(r, 65536):
                pass
        writer.join()
        os.close(r)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=2000), to_child=st.booleans())
@example(data=b"\x00\x00\x00", to_child=True)
@example(data=b"\x00\x00\x00\x05abc", to_child=True)
@example(data=b"\x10\x00\x00\x01", to_child=False)
def test_read_message_on_a_pipe_agrees_with_the_frame_reader(data: bytes, to_child: bool) -> None:
    from_pipe = read_all_from_pipe(data, to_child=to_child)
    in_memory = feed_in_chunks(data, [], to_child=to_child)
    if isinstance(in_memory, str):
        assert isinstance(from_pipe, str), (in_memory, from_pipe)
        return
    messages, held = in_memory
    if held:
        assert isinstance(from_pipe, str) and "truncated" in from_pipe
    else:
        assert isinstance(from_pipe, list)
        assert [protocol.encode(m) for m in from_pipe] == [protocol.encode(m) for m in messages]


def test_an_oversized_header_is_refused_before_any_body_is_read() -> None:
    header = b"PQ" + (protocol.MAX_FRAME + 1).to_bytes(4, "big")
    with pytest.raises(ProtocolError, match="exceeds"):
        protocol.FrameReader(to_child=False).feed(header)
    assert isinstance(read_all_from_pipe(header, to_child=True), str)


# -- a real child fed bad frames by its "supervisor" (this test) ------------------------


@contextlib.contextmanager
def bare_child() -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    """``python -m procqueue.child`` on pipes this test holds: (process, to_child, from_child)."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "procqueue.child",
            SPEC,
            "1",
            str(os.getpid()),
            str(to_r),
            str(from_w),
        ],
        pass_fds=(to_r, from_w),
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    os.close(to_r)
    os.close(from_w)
    try:
        hello = protocol.read_message(from_r, to_child=False)
        assert isinstance(hello, protocol.Hello) and hello.error is None, hello
        yield child, to_w, from_r
    finally:
        for fd in (to_w, from_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        if child.stderr is not None:
            child.stderr.close()


def test_a_bare_child_runs_a_valid_frame() -> None:
    with bare_child() as (child, to_w, from_r):
        args = msgspec.json.encode({"value": [1, "two"]})
        protocol.write_all(
            to_w,
            protocol.encode(
                protocol.Run(job_id=7, attempt=1, name=H + "echo", args=args, steps={})
            ),
        )
        done = protocol.read_message(from_r, to_child=False)
        assert isinstance(done, protocol.Done) and msgspec.json.decode(done.result) == [1, "two"]
        protocol.write_all(to_w, protocol.encode(protocol.Shutdown()))
        assert child.wait(timeout=10) == 0


BAD_TO_CHILD = {
    "garbage": bytes(range(7, 60)),
    "oversized header": (protocol.MAX_FRAME + 1).to_bytes(4, "big") + b"x",
    "truncated then EOF": protocol.encode(protocol.Shutdown())[:-1],
    "header only then EOF": b"\x00\x00\x01\x00",
    "a supervisor-bound message": protocol.encode(protocol.Done(job_id=1, result=b"1")),
    "msgpack of the wrong shape": b"\x00\x00\x00\x01\x01",
}


@pytest.mark.parametrize("payload", BAD_TO_CHILD.values(), ids=BAD_TO_CHILD.keys())
def test_a_child_refuses_bad_frames_with_one_line_and_exit_3(payload: bytes) -> None:
    with bare_child() as (child, to_w, _from_r):
        os.write(to_w, payload)
        os.close(to_w)
        assert child.wait(timeout=20) == 3
        assert child.stderr is not None
        err = child.stderr.read().decode()
    assert err.startswith("procqueue child: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


# -- a job writing bad frames to its own pipe: the supervisor's side --------------------


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def pipe_job(c: Cluster, payload: bytes, then: str, timeout: float = 30) -> JobInfo:
    return c.run("pipe_write", {"payload": payload.hex(), "then": then}, timeout=timeout)


BAD_TO_SUPERVISOR = {
    "oversized header": ((protocol.MAX_FRAME + 1).to_bytes(4, "big"), "return"),
    "malformed body": (b"\x00\x00\x00\x03abc", "return"),
    "wrong message type": (
        protocol.encode(protocol.Run(job_id=1, attempt=1, name="x", args=b"{}", steps={})),
        "return",
    ),
    "unknown tag": (frame(msgspec.msgpack.encode({"type": "Nope", "job_id": 1})), "return"),
    "truncated, then exit": (protocol.encode(protocol.Done(job_id=1, result=b"1"))[:-2], "exit"),
    "half a header, then exit": (b"\x00\x00", "exit"),
    "garbage, then exit": (bytes(range(256)), "exit"),
}


@pytest.mark.parametrize(
    ("payload", "then"), BAD_TO_SUPERVISOR.values(), ids=BAD_TO_SUPERVISOR.keys()
)
def test_a_job_writing_bad_frames_fails_with_a_protocol_error_and_the_supervisor_runs_on(
    pipe_cluster: Cluster, payload: bytes, then: str
) -> None:
    info = pipe_job(pipe_cluster, payload, then)
    assert info.state == JobState.FAILED
    assert "protocol" in (info.error or ""), info.error
    assert pipe_cluster.alive()
    assert pipe_cluster.run("echo", {"value": "still here"}).result == "still here"


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(garbage=st.binary(min_size=1, max_size=200))
def test_random_bytes_from_a_dying_job_fail_it_clearly(
    pipe_cluster: Cluster, garbage: bytes
) -> None:
    parsed = feed_in_chunks(garbage, [], to_child=False)
    if isinstance(parsed, tuple) and any(
        isinstance(m, protocol.Hello) for m in parsed[0]
    ):  # a stray Hello is the xfail test below
        return
    info = pipe_job(pipe_cluster, garbage, "exit")
    assert info.state == JobState.FAILED
    if isinstance(parsed, str) or parsed[1]:
        assert "protocol" in (info.error or ""), (garbage, info.error)
    else:  # whole frames the supervisor ignores; then the child died
        assert "child process exited with code 0" in (info.error or ""), info.error
    assert pipe_cluster.alive()


_ids = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_texts = st.none() | st.text(max_size=3000)
_floats = st.none() | st.floats(allow_nan=True, allow_infinity=True)
SUPERVISOR_BOUND = st.one_of(
    st.builds(protocol.Progress, job_id=_ids, text=_texts, fraction=_floats),
    st.builds(
        protocol.Step,
        job_id=_ids,
        name=st.text(max_size=300),
        value=st.binary(max_size=300) | st.sampled_from([b"1", b'"ok"', b"\xff\xfe"]),
    ),
    st.builds(
        protocol.Done,
        job_id=_ids,
        result=st.binary(max_size=300) | st.sampled_from([b"null", b"[1]", b"\xc3\x28"]),
        progress=_texts,
        fraction=_floats,
    ),
    st.builds(
        protocol.Failed,
        job_id=_ids,
        kind=st.sampled_from(["retry", "permanent", "error", "revoked", "?"]),
        error=st.text(max_size=5000),
        delay=_floats,
        progress=_texts,
        fraction=_floats,
    ),
)
"""Every frame type a child may send, with any field values."""


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(message=SUPERVISOR_BOUND, own=st.booleans())
def test_any_well_formed_frame_from_job_code_costs_at_most_that_job(
    pipe_cluster: Cluster, message: protocol.Message, own: bool
) -> None:
    try:
        frame = protocol.encode(message)
    except ProtocolError:
        return  # larger than a frame may be: the child could not send it
    job_id = pipe_cluster.app.enqueue(H + "own_frame", {"frame": frame.hex(), "own": own})
    info = pipe_cluster.app.wait(job_id, timeout=60)
    assert info.state in TERMINAL
    assert len(info.progress or "") <= 1000 and len(info.error or "") <= 2000
    assert pipe_cluster.alive()
    assert pipe_cluster.run("echo", {"value": "still here"}).result == "still here"


@pytest.mark.timeout(60)
def test_a_partial_frame_from_a_live_child_fails_the_job(tmp_path: Path) -> None:
    with fresh_cluster("sqlite", tmp_path) as c:
        c.ensure()
        job_id = c.app.enqueue(H + "pipe_write", {"payload": "00010000", "then": "return"})
        info = c.app.wait(job_id, timeout=10)  # TimeoutError: still running
        assert info.state == JobState.FAILED and "protocol" in (info.error or "")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.timeout(60)
def test_a_partial_frame_with_the_right_magic_fails_the_job_and_the_next_runs(
    tmp_path: Path, backend: str
) -> None:
    header = b"PQ" + (100).to_bytes(4, "big") + b"0123456789"
    with fresh_cluster(backend, tmp_path) as c:
        c.ensure()
        job_id = c.app.enqueue(H + "pipe_write", {"payload": header.hex(), "then": "return"})
        info = c.app.wait(job_id, timeout=30)
        assert info.state == JobState.FAILED and "protocol" in (info.error or "")
        assert c.run("echo", {"value": "next"}).result == "next"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.timeout(120)
def test_a_flood_of_step_frames_costs_only_its_job(tmp_path: Path, backend: str) -> None:
    """3,000 hand-written step frames of 4 KB beside an innocent 8 s job under
    a 6 s lease: the flood fails its own job at once; renewals go on."""
    with fresh_cluster(backend, tmp_path, lease=6) as c:
        c.ensure()
        innocent = c.app.enqueue(H + "logged", {"log": str(tmp_path / "log"), "seconds": 8})
        flood = c.app.enqueue(H + "step_flood", {"count": 3000, "kb": 4})
        info = c.app.wait(flood, timeout=30)
        assert info.state == JobState.FAILED and "step frame" in (info.error or "")
        assert c.app.wait(innocent, timeout=60).state == JobState.DONE
        assert c.alive()


@pytest.mark.parametrize(
    "hello",
    [protocol.Hello(pid=1, version=1, error="boom"), protocol.Hello(pid=1, version=99)],
    ids=["with an error", "of another version"],
)
@pytest.mark.timeout(60)
def test_a_stray_hello_from_a_job_does_not_stop_the_supervisor(
    tmp_path: Path, hello: protocol.Hello
) -> None:
    with fresh_cluster("sqlite", tmp_path) as c:
        sup = c.ensure()
        job_id = c.app.enqueue(H + "pipe_write", {"payload": protocol.encode(hello).hex()})
        wait_until(
            lambda: sup.poll() is not None or c.app.get(job_id).state in TERMINAL,
            timeout=20,
            what="the job to end or the supervisor to exit",
        )
        assert sup.poll() is None, sup.log_tail()
        info = c.app.get(job_id)
        assert info.state == JobState.FAILED and "protocol" in (info.error or "")


@pytest.mark.timeout(60)
def test_a_stray_frame_costs_only_the_job_that_sent_it(tmp_path: Path) -> None:
    with fresh_cluster("sqlite", tmp_path, workers=1) as c:
        c.ensure()
        c.app.wait(c.app.enqueue(H + "echo", {"value": "warm"}), timeout=30)
        ids = c.app.enqueue_many(
            [(H + "inject_step", {}, {})] + [(H + "echo", {"value": n}, {}) for n in range(3)]
        )
        infos = [c.app.wait(i, timeout=30) for i in ids]
        assert [i.state for i in infos[1:]] == [JobState.DONE] * 3, [i.error for i in infos]


# -- the command line, fuzzed ------------------------------------------------------------

MISSING_DIR = "sqlite:////zz-procqueue-no-such-dir/q"
"""A file in a directory that does not exist: SQLite cannot create it."""
SAFE_HOSTS = ["127.0.0.1:1", "[::1]:1", "127.0.0.1:99999", "127.0.0.1:abc", "%zz", "[::1"]
"""Hosts that never reach a real server (nothing listens on port 1)."""
QUERY_KEYS = ["schema", "connect_timeout", "sslmode", "application_name", "options", "bogus"]
no_surrogates = st.characters(blacklist_categories=["Cs"])
fuzz_text = st.text(alphabet=no_surrogates, max_size=30)


@st.composite
def fuzzed_dsns(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["text", "sqlite", "postgres"]))
    if kind == "text":
        text = draw(fuzz_text)
        return "x" + text if text.startswith(("sqlite:", "postgres")) else text or "?"
    if kind == "sqlite":  # never a path that could be created
        tail = draw(st.text(alphabet=no_surrogates, max_size=20)).replace("/", "_")
        prefix = draw(st.sampled_from(["sqlite://", "sqlite:///", "sqlite:", MISSING_DIR]))
        return prefix + (tail if prefix in ("sqlite:", MISSING_DIR) else "")
    scheme = draw(st.sampled_from(["postgresql://", "postgres://"]))
    user = draw(st.sampled_from(["", "u@", "u:p%40ss@", ":@"]))
    host = draw(st.sampled_from(SAFE_HOSTS))
    db = draw(st.sampled_from(["/test", "/", "", "/x y", "/%00"]))
    pairs = draw(st.lists(st.tuples(st.sampled_from(QUERY_KEYS), fuzz_text), max_size=3))
    query = "&".join(f"{k}={v}" for k, v in pairs)
    return f"{scheme}{user}{host}{db}" + (f"?{query}" if query else "")


COMMANDS = [
    ["jobs"],
    ["stats"],
    ["show", "1"],
    ["cancel", "1"],
    ["retry", "1"],
    ["prune"],
    ["queues"],
    ["migrate"],
    ["enqueue", H + "echo", "--args", '{"value": 1}'],
]


def assert_one_error_line(code: int, err: str) -> None:
    assert code in (1, 2), (code, err)
    assert err.startswith("procqueue: error: "), err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory with no config file and no default database in it."""
    monkeypatch.chdir(tmp_path)
    for name in ("PROCQUEUE_DSN", "PROCQUEUE_CONFIG", "PROCQUEUE_DASHBOARD_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(dsn=fuzzed_dsns(), command=st.sampled_from(COMMANDS))
def test_fuzzed_dsns_end_with_exit_1_or_2_and_one_line(
    cli_env: None, capsys: pytest.CaptureFixture[str], dsn: str, command: list[str]
) -> None:
    assert not os.path.exists(MISSING_DIR[len("sqlite:///") :].rsplit("/", 1)[0])
    capsys.readouterr()
    code = cli.main([*command, "--dsn", dsn])
    out, err = capsys.readouterr()
    assert_one_error_line(code, err)
    assert out == ""
    assert "p@ss" not in err and "p%40ss" not in err  # no password in messages


OPTIONS: dict[str, list[str]] = {
    "supervise": [
        "--workers",
        "--queues",
        "--queue",
        "--lease",
        "--poll",
        "--grace",
        "--kill-grace",
        "--max-jobs-per-child",
        "--max-memory-per-child",
        "--retention-days",
        "--metrics-port",
        "--log-level",
        "--no-cron",
    ],
    "enqueue": ["--args", "--key", "--delay", "--queue", "--priority", "--serial-key", "--app"],
    "jobs": ["--state", "--queue", "--name", "--limit", "--json"],
    "show": ["--json"],
    "cancel": [],
    "retry": [],
    "stats": ["--json"],
    "prune": ["--older-than", "--failed"],
    "queues": [],
    "migrate": [],
    "cron": ["--json"],
}
VALUES = st.one_of(
    fuzz_text,
    st.sampled_from(["-1", "0", "1", "nan", "inf", "1e309", "2.5", "a=1", "=", "a=0", "{}", "[]"]),
    st.integers().map(str),
    st.floats().map(str),
)


@st.composite
def fuzzed_command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(OPTIONS)))
    argv = [command]
    if command in ("supervise", "cron"):
        argv.append("zz_no_such_module_" + draw(st.text(alphabet="abc_", max_size=5)))
    elif command == "enqueue":
        argv.append(draw(st.sampled_from([H + "echo", "no.such.job", "", "tests", H])))
    elif command in ("show", "cancel", "retry"):
        argv.append(draw(st.sampled_from(["1", "-1", "x", "99999999999999999999", ""])))
    elif command == "queues":
        argv += draw(st.sampled_from([[], ["pause", "q"], ["resume"], ["bogus", "q"]]))
    for _ in range(draw(st.integers(0, 4))):
        option = draw(st.sampled_from([*OPTIONS[command], "--bogus", "-x", "--dsn"]))
        argv.append(option)
        if draw(st.booleans()):
            argv.append(draw(VALUES))
    argv += ["--dsn", draw(fuzzed_dsns())]  # never a database that answers
    return argv


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=fuzzed_command_lines())
@example(argv=["supervise", "zz_m", "--lease", "0.5", "--dsn", "x"])
@example(argv=["supervise", "zz_m", "--workers", "0", "--dsn", "x"])
@example(argv=["supervise", "zz_m", "--queue", "a=0", "--dsn", "x"])
@example(argv=["supervise", "zz_m", "--poll", "nan", "--dsn", "x"])
@example(argv=["enqueue", H + "echo", "--args", "[1]", "--dsn", "x"])
@example(argv=["enqueue", H + "echo", "--args", '{"value": NaN}', "--dsn", "x"])
@example(argv=["enqueue", H + "echo", "--delay", "-1", "--dsn", "x"])
@example(argv=["jobs", "--limit", "0", "--dsn", "x"])
def test_fuzzed_command_lines_never_print_a_traceback(
    cli_env: None, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    capsys.readouterr()
    code = cli.main(argv)
    _, err = capsys.readouterr()
    if code == 0:
        assert err == "" or "Traceback" not in err
        return
    assert_one_error_line(code, err)


@pytest.mark.parametrize("dsn", ["postgresql://[::1", "sqlite:///a\x00b.db"])
def test_malformed_dsns_are_usage_errors(
    cli_env: None, capsys: pytest.CaptureFixture[str], dsn: str
) -> None:
    code = cli.main(["stats", "--dsn", dsn])
    _, err = capsys.readouterr()
    assert_one_error_line(code, err)
    assert code == 2 and "unexpected" not in err, err


def test_undecodable_bytes_on_the_command_line_end_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "procqueue", "stats", "--dsn", b"\xff\xfe://x"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("PROCQUEUE_")}
        | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.decode(errors="replace")
    assert err.startswith("procqueue: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


RESERVED = "information_schema"


def test_a_reserved_postgres_schema_is_refused(
    cli_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    need_postgres()
    tables = ("jobs", "queues", "chores", "procqueue_schema")
    db = cluster.Database("postgres", f"{cluster.PG_URL}?schema={RESERVED}", schema=RESERVED)
    present = (
        f"SELECT count(*) FROM pg_tables WHERE schemaname = '{RESERVED}' AND tablename IN {tables}"
    )
    if db.query(present)[0][0]:
        pytest.skip(f"{RESERVED} already holds tables named like procqueue's")
    try:
        code = cli.main(["migrate", "--dsn", db.dsn])
        _, err = capsys.readouterr()
        assert code == 2, err
    finally:
        if db.query(present)[0][0]:  # created just now, by this test: remove them
            import psycopg

            with psycopg.connect(cluster.PG_URL, autocommit=True) as conn:
                conn.execute("DROP TABLE IF EXISTS " + ", ".join(f"{RESERVED}.{t}" for t in tables))
