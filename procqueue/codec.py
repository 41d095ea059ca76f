"""How arguments and results become JSON and come back: msgspec,
plus procqueue's own encoding of scientific types and an App's hooks.

Encoded as their JSON forms, without procqueue importing numpy: numpy
scalars and arrays (duck-typed: ``.tolist()`` with ``__array__``, else
``.item()``), `pathlib` paths (text), enums (their value) and sets (arrays),
besides what msgspec encodes itself. ``App(enc_hook=..., dec_hook=...)``
adds the user's types, in msgspec's terms; the App's hook is asked first.

A value that still can't be encoded is named with its path inside the
value: ``result["stats"][2]: mylib.Thing``.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import pathlib
import re
from collections.abc import Callable
from typing import Any

import msgspec

EncHook = Callable[[Any], Any]
DecHook = Callable[[type, Any], Any]

_ENCODE_ERRORS = (TypeError, ValueError, msgspec.EncodeError, OverflowError, RecursionError)
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, ValueError, RecursionError)
"""Every exception decoding untrusted bytes can raise: a value nested deeper
than the interpreter's stack is a RecursionError, not a DecodeError."""
_PATH_DEPTH = 64
MAX_DEPTH = 512
"""Deepest nesting of arrays and objects a JSON value may have: decoding is
recursive, so a deeper value could exhaust whichever reader's stack."""
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(range(256)).translate(None, b"[]{}")
_STEP = [1 if c in b"[{" else -1 for c in range(256)]  # indexed by the brackets left


def too_deep(raw: bytes) -> bool:
    """Whether JSON `raw` nests arrays and objects more than `MAX_DEPTH` deep
    (brackets inside strings don't count). Linear in `raw`, never recursive."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:  # the common case: nothing to scan
        return False
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH


class Unchecked(Exception):
    """Raised by `Codec.dec_hook` for a type nobody can build: the value is
    passed on as decoded from JSON, unchecked."""


def type_name(value: object) -> str:
    """``numpy.datetime64``, ``int``: the module-qualified name of `value`'s type."""
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def builtin_enc_hook(value: Any) -> Any:
    """procqueue's own encodings (see the module docstring)."""
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return list(value)
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and hasattr(value, "__array__"):
        return tolist()
    item = getattr(value, "item", None)
    if callable(item) and hasattr(value, "dtype"):
        return item()
    raise TypeError(f"Encoding objects of type {type_name(value)} is unsupported")


class Codec:
    """One App's encoding of arguments and results.

    Args:
        enc_hook: the App's ``enc_hook(value) -> encodable``; raises
            NotImplementedError for a type it does not handle.
        dec_hook: the App's ``dec_hook(type, value) -> value of type``; raises
            NotImplementedError for a type it does not handle.
    """

    def __init__(self, enc_hook: EncHook | None = None, dec_hook: DecHook | None = None) -> None:
        self.user_enc = enc_hook
        self.user_dec = dec_hook
        self._encoder = msgspec.json.Encoder(enc_hook=self.enc_hook)

    def enc_hook(self, value: Any) -> Any:
        if self.user_enc is not None:
            try:
                return self.user_enc(value)
            except (NotImplementedError, TypeError):
                pass  # not one of the app's types
        return builtin_enc_hook(value)

    def dec_hook(self, kind: type, value: Any) -> Any:
        if self.user_dec is not None:
            try:
                return self.user_dec(kind, value)
            except NotImplementedError:
                pass  # not one of the app's types
        if isinstance(kind, type) and issubclass(kind, pathlib.PurePath) and isinstance(value, str):
            return kind(value)
        raise Unchecked(kind)

    def encode(self, value: Any) -> bytes:
        """`value` as JSON; msgspec's errors (TypeError, EncodeError, ...) propagate."""
        return self._encoder.encode(value)

    def to_builtins(self, value: Any) -> Any:
        return msgspec.to_builtins(value, enc_hook=self.enc_hook)

    def convert(self, value: Any, kind: Any) -> Any:
        """`value` (decoded JSON) as `kind`, the way a child receives it:
        msgspec's lax conversion plus the hooks. A type nobody can build
        (no hook for it) leaves `value` as it is: it can't be checked.

        Raises:
            msgspec.ValidationError: `value` does not fit `kind`.
        """
        try:
            return msgspec.convert(value, kind, strict=False, dec_hook=self.dec_hook)
        except (Unchecked, TypeError):  # TypeError: a type msgspec can't convert to at all
            return value

    def unencodable(self, value: Any, root: str) -> str | None:
        """``root["stats"][2]: mylib.Thing``: where in `value` the first value
        that can't be encoded sits, and its type (None if all encode)."""
        return self._find(value, root, 0)

    def _find(self, value: Any, path: str, depth: int) -> str | None:
        try:
            self.encode(value)
            return None
        except _ENCODE_ERRORS as exc:
            reason = str(exc)
        if depth < _PATH_DEPTH:
            for key, item in self._children(value):
                found = self._find(item, f"{path}[{key}]", depth + 1)
                if found is not None:
                    return found
        if "unsupported" in reason:  # the type says it all
            return f"{path}: {type_name(value)}"
        return f"{path}: {type_name(value)} ({reason})"

    @staticmethod
    def _children(value: Any) -> list[tuple[str, Any]]:
        if isinstance(value, dict):
            return [(repr(k), v) for k, v in value.items()]
        if isinstance(value, list | tuple):
            return [(str(i), v) for i, v in enumerate(value)]
        if isinstance(value, msgspec.Struct):
            return [(repr(f), getattr(value, f)) for f in value.__struct_fields__]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return [(repr(f.name), getattr(value, f.name)) for f in dataclasses.fields(value)]
        return []
