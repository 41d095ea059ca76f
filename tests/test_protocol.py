"""Frames as untrusted bytes: whatever a job writes on the pipe is a message
or a `ProtocolError`, never another exception."""

from __future__ import annotations

import struct

import pytest

from procqueue import ProtocolError, protocol


def _frame(body: bytes) -> bytes:
    return struct.pack(">2sI", b"PQ", len(body)) + body


@pytest.mark.parametrize("to_child", [False, True])
def test_a_body_nested_past_the_stack_is_a_protocol_error(to_child: bool) -> None:
    deep = b"\x91" * 100_000 + b"\xc0"  # msgpack: an array in an array ... in an array
    with pytest.raises(ProtocolError, match="malformed frame"):
        protocol.FrameReader(to_child=to_child).feed(_frame(deep))


def test_a_well_formed_frame_still_decodes() -> None:
    message = protocol.Progress(job_id=7, text="half", fraction=0.5)
    assert protocol.FrameReader(to_child=False).feed(protocol.encode(message)) == [message]
