"""Configuration from a file and the environment (docs/configuration.md).

Where a value comes from, first match wins: a command-line flag, the
environment variable ``PROCQUEUE_<KEY>``, the config file, the default.

The config file is ``--config PATH``, else ``$PROCQUEUE_CONFIG``, else
``procqueue.toml`` in the current directory (top-level keys), else the
``[tool.procqueue]`` table of ``pyproject.toml`` in the current directory.
A file named ``pyproject.toml`` is always read through its
``[tool.procqueue]`` table. Unknown keys and wrong types are ConfigErrors
naming the file (or variable) and the key.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from procqueue import errors

ENV_PREFIX = "PROCQUEUE_"
CONFIG_ENV = "PROCQUEUE_CONFIG"
FILE_NAME = "procqueue.toml"
PYPROJECT = "pyproject.toml"

_Positive = Annotated[int, msgspec.Meta(ge=1)]
_Name = Annotated[str, msgspec.Meta(min_length=1)]


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Every key a config file may set; None means "not set here".

    The defaults that apply when no source sets a key are `supervisor.settings.Settings`'
    (and ``log_format="text"``, ``log_level="info"``).
    """

    dsn: _Name | None = None
    workers: _Positive | None = None
    queues: list[_Name] | None = None
    limits: dict[_Name, _Positive] | None = None
    lease: Annotated[float, msgspec.Meta(ge=1.0)] | None = None
    poll: Annotated[float, msgspec.Meta(gt=0.0)] | None = None
    grace: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    kill_grace: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    outcome_wait: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    retention_days: Annotated[float, msgspec.Meta(ge=0.0)] | None = None
    max_jobs_per_child: _Positive | None = None
    max_memory_per_child: Annotated[float, msgspec.Meta(gt=0.0)] | None = None
    max_memory_per_job: Annotated[float, msgspec.Meta(gt=0.0)] | None = None
    cron: bool | None = None
    log_format: Literal["text", "json"] | None = None
    log_level: Literal["debug", "info", "warning", "error"] | None = None
    metrics_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    metrics_host: _Name | None = None
    job_user: _Name | None = None

    def given(self) -> dict[str, Any]:
        """The keys this source sets, with their values."""
        return {k: v for k in self.__struct_fields__ if (v := getattr(self, k)) is not None}

    def over(self, base: Config) -> Config:
        """`base` with every key set here replaced by this source's value."""
        return msgspec.structs.replace(base, **self.given())


KEYS: tuple[str, ...] = Config.__struct_fields__


def env_var(key: str) -> str:
    """The environment variable of config key `key`: ``PROCQUEUE_WORKERS``."""
    return ENV_PREFIX + key.upper()


# -- the file ------------------------------------------------------------------


def find(explicit: str | None, environ: Mapping[str, str], cwd: Path) -> Path | None:
    """The config file to read: `explicit`, ``$PROCQUEUE_CONFIG``, ``procqueue.toml``,
    ``pyproject.toml`` (only when it has a ``[tool.procqueue]`` table), or None."""
    chosen = explicit or environ.get(CONFIG_ENV)
    if chosen:
        return Path(chosen)
    if (cwd / FILE_NAME).is_file():
        return Path(FILE_NAME)
    pyproject = cwd / PYPROJECT
    if pyproject.is_file() and "procqueue" in _parse(pyproject, PYPROJECT).get("tool", {}):
        return Path(PYPROJECT)
    return None


def _parse(path: Path, shown: str) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise errors.ConfigError(f"cannot read config file {shown}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise errors.ConfigError(f"{shown}: invalid TOML: {exc}") from None


def load(path: Path, *, cwd: Path | None = None) -> Config:
    """The settings in config file `path` (relative paths from `cwd`)."""
    shown = str(path)
    document = _parse((cwd or Path.cwd()) / path, shown)
    where = ""
    if path.name == PYPROJECT:
        where = " in [tool.procqueue]"
        tool = document.get("tool", {})
        document = tool.get("procqueue", {}) if isinstance(tool, dict) else {}
        if not isinstance(document, dict):
            raise errors.ConfigError(f"{shown}: [tool.procqueue] must be a table")
    return _convert(
        document,
        shown,
        unknown=lambda key: f"{shown}: unknown key {key!r}{where}",
        naming=lambda key: f"{shown}: {key!r}{where}",
    )


# -- the environment -------------------------------------------------------------


def from_env(environ: Mapping[str, str]) -> Config:
    """The settings given as ``PROCQUEUE_<KEY>`` environment variables.

    Lists are comma-separated (``a,b``), limits ``NAME=N,NAME=N``, booleans
    ``true``/``false`` (or ``1``/``0``, ``yes``/``no``, ``on``/``off``).
    """
    kinds = {f.name: f.type for f in _FIELDS}
    values: dict[str, Any] = {}
    for key in KEYS:
        text = environ.get(env_var(key))
        if text is None or text.strip() == "":
            continue
        try:
            values[key] = _from_text(text.strip(), kinds[key])
        except ValueError as exc:
            raise errors.ConfigError(f"{env_var(key)}: {exc}, got {text!r}") from None
    return _convert(
        values,
        "the environment",
        unknown=env_var,
        naming=lambda key: env_var(re.split(r"[.\[]", key)[0]),
    )


def _from_text(text: str, kind: msgspec.inspect.Type) -> Any:
    if isinstance(kind, msgspec.inspect.UnionType):  # X | None
        (kind,) = [t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)]
    if isinstance(kind, msgspec.inspect.IntType):
        try:
            return int(text)
        except ValueError:
            raise ValueError("expected an integer") from None
    if isinstance(kind, msgspec.inspect.FloatType):
        try:
            return float(text)
        except ValueError:
            raise ValueError("expected a number") from None
    if isinstance(kind, msgspec.inspect.BoolType):
        flag = _BOOLEANS.get(text.lower())
        if flag is None:
            raise ValueError("expected true or false")
        return flag
    if isinstance(kind, msgspec.inspect.ListType):
        return [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(kind, msgspec.inspect.DictType):
        limits: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep or not value.strip().lstrip("-").isdigit():
                raise ValueError("expected NAME=LIMIT[,NAME=LIMIT...]")
            limits[name.strip()] = int(value)
        return limits
    return text  # str and the text choices: checked by _convert


_BOOLEANS = {"true": True, "1": True, "yes": True, "on": True}
_BOOLEANS |= {"false": False, "0": False, "no": False, "off": False}
_INFO = msgspec.inspect.type_info(Config)
assert isinstance(_INFO, msgspec.inspect.StructType)
_FIELDS = _INFO.fields


# -- checking ------------------------------------------------------------------------


def _convert(
    values: Any, source: str, *, unknown: Callable[[str], str], naming: Callable[[str], str]
) -> Config:
    """`values` as a Config, or a one-line ConfigError: ``unknown(key)`` for a key
    Config does not have, ``naming(key) + ": " + why`` for a bad value."""
    if not isinstance(values, dict):
        raise errors.ConfigError(f"{source}: expected a table of settings")
    try:
        config = msgspec.convert(values, Config)
    except msgspec.ValidationError as exc:
        message = str(exc)
        field = re.match(r"Object contains unknown field `([^`]*)`", message)
        if field:
            raise errors.ConfigError(
                f"{unknown(field.group(1))} (known keys: {', '.join(KEYS)})"
            ) from None
        key, why = _explain(message)
        if ", got" not in why and isinstance(values.get(key), int | float | str):
            why += f", got {values[key]!r}"
        raise errors.ConfigError(f"{naming(key)}: {why}") from None
    for key, value in config.given().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise errors.ConfigError(f"{naming(key)}: expected a finite number, got {value}")
    return config


_AT = re.compile(r"^(?P<what>.*?)(?: - at `(?P<path>[^`]*)`(?: in `(?P<outer>[^`]*)`)?)?$", re.S)
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]*)`(?P<rest>.*)$", re.S)
_CHOICES = {"log_format": ("text", "json"), "log_level": ("debug", "info", "warning", "error")}


def _explain(message: str) -> tuple[str, str]:
    """The key and the reason in msgspec's validation `message`, in config-file words:
    ``Expected `int | null`, got `str` - at `$.workers``` -> ``('workers',
    'expected int, got str')``."""
    at = _AT.match(message)
    assert at is not None  # the pattern matches any text
    what = at.group("what")
    path = at.group("outer") or at.group("path") or "$"
    key = path.removeprefix("$").lstrip(".").replace("[...]", "")
    expected = _EXPECTED.match(what)
    if expected:
        want = expected.group("want").replace(" | null", "")
        what = _words(f"expected {want}{expected.group('rest')}")
        if at.group("outer"):  # a table's key, e.g. an empty queue name in limits
            what += " (a queue name)"
    elif what.startswith("Invalid enum value"):
        choices = ", ".join(_CHOICES.get(key, ()))
        what = what.replace("Invalid enum value", f"expected one of {choices}, got", 1)
    return key, what


def _words(text: str) -> str:
    return text.replace("`", "").replace("object", "table")


def layered(explicit: str | None, *, cwd: Path | None = None) -> Config:
    """The settings of the environment over those of the config file (if any)."""
    here = cwd or Path.cwd()
    path = find(explicit, os.environ, here)
    from_file = load(path, cwd=here) if path is not None else Config()
    return from_env(os.environ).over(from_file)
