"""Config loading: YAML with line numbers, ``${env:VAR:-default}`` expansion, and strict dataclasses.

Every error names the key, the file and the line, and unknown keys are errors (as Vector's
``deny_unknown_fields``), because a misspelt option that is silently ignored is a bug nobody finds.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin

from obsbox.durations import parse_duration

if TYPE_CHECKING:  # PyYAML is imported by the functions that read YAML: a bridge worker never does
    import yaml

T = TypeVar("T")
KeyPath = tuple[str | int, ...]


class ConfigError(ValueError):
    """A config problem, located: ``file:line: key: what is wrong``."""

    def __init__(
        self, message: str, *, source: str | None = None, line: int | None = None, key: str | None = None
    ) -> None:
        self.message, self.source, self.line, self.key = message, source, line, key
        where = ":".join(str(part) for part in (source, line) if part is not None)
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{key + ': ' if key else ''}{message}")


class FieldError(ValueError):
    """Raised by a config dataclass's ``__post_init__`` about one of its fields, so the error points
    at that key and its line rather than at the whole section."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field = field_name
        super().__init__(message)


@dataclass
class Document:
    """Plain data loaded from YAML, plus the line of every key (1-based) for error messages."""

    data: Any
    source: str = "<config>"
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def error(self, path: KeyPath, message: str) -> ConfigError:
        """A ConfigError pointing at ``path``, or at its nearest located parent."""
        probe = path
        while probe and probe not in self.lines:
            probe = probe[:-1]
        return ConfigError(message, source=self.source, line=self.lines.get(probe), key=dotted(path) or None)


def dotted(path: KeyPath) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))


def load_yaml(path: str | Path) -> Document:
    """Load a YAML file, keeping the line of each key so later errors can point at it."""
    return parse_yaml(_read(path), source=str(path))


def load_yaml_all(path: str | Path) -> list[Document]:
    """Load every ``---``-separated document of a YAML file, as ``load_yaml`` loads one."""
    return parse_yaml_all(_read(path), source=str(path))


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read the config file: {reason}", source=str(path)) from None


def parse_yaml(text: str, source: str = "<config>") -> Document:
    import yaml  # noqa: PLC0415

    node = _compose(lambda: yaml.compose(text, Loader=yaml.SafeLoader), source)
    return _document(node, source)


def parse_yaml_all(text: str, source: str = "<config>") -> list[Document]:
    """Each ``---``-separated document of a YAML stream, with the lines of its keys in the whole text."""
    import yaml  # noqa: PLC0415

    nodes = _compose(lambda: list(yaml.compose_all(text, Loader=yaml.SafeLoader)), source)
    return [_document(node, source) for node in nodes if node is not None]


def _compose(compose: typing.Callable[[], T], source: str) -> T:
    import yaml  # noqa: PLC0415

    try:
        return compose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(
            f"not valid YAML: {getattr(exc, 'problem', exc)}", source=source, line=mark.line + 1 if mark else None
        ) from exc


def _document(node: yaml.Node | None, source: str) -> Document:
    doc = Document(None, source)
    doc.data = {} if node is None else _plain(node, (), doc)
    return doc


def _plain(node: yaml.Node, path: KeyPath, doc: Document) -> Any:
    import yaml  # noqa: PLC0415

    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.SafeLoader(" ").construct_object(key_node)
            if not isinstance(key, str | int | float | bool):
                raise ConfigError("keys must be scalars", source=doc.source, line=key_node.start_mark.line + 1)
            key = str(key)
            if key in out:
                raise ConfigError(
                    f"duplicate key {key!r}",
                    source=doc.source,
                    line=key_node.start_mark.line + 1,
                    key=dotted((*path, key)),
                )
            where: KeyPath = (*path, key)
            doc.lines[where] = key_node.start_mark.line + 1
            out[key] = _plain(value_node, where, doc)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, (*path, i), doc) for i, item in enumerate(node.value)]
    return yaml.SafeLoader(" ").construct_object(node)


# ``${env:VAR}``, ``${env:VAR:-default}`` or ``${VAR}``: group 1 is the name, group 2 the default (None: none)
ENV_REFERENCE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: str, environ: typing.Mapping[str, str] | None = None) -> str:
    """Expand ``${env:VAR}``, ``${env:VAR:-default}`` and ``${VAR}`` as the OTel Collector does.

    Raises KeyError naming the variable when it is unset and has no default.
    """
    env = os.environ if environ is None else environ

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise KeyError(name)

    return ENV_REFERENCE.sub(substitute, value)


_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2, "gb": 1000**3, "gib": 1024**3}
SIZE_FORMS = "a whole number of bytes, or one with a unit such as '512KiB', '1MiB' or '1MB'"


def parse_size(text: str) -> int:
    """Bytes in ``text`` ("4096", "512KiB", "1MB"): the one size syntax of configs and command lines.

    Raises ValueError for anything else (fractions, negatives, unknown units)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size ({SIZE_FORMS})")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()]


def build(cls: type[T], data: Any, doc: Document | None = None, path: KeyPath = ()) -> T:
    """Build the dataclass ``cls`` from plain data, strictly.

    Floats also take durations ("250ms", "5s", "1m"); ints also take sizes ("1MiB"). Strings are
    env-expanded. Unknown keys, wrong types and missing required fields raise a located ConfigError.
    """
    doc = doc or Document(data)
    built: T = _convert(cls, data, doc, path)
    return built


def _convert(tp: Any, value: Any, doc: Document, path: KeyPath) -> Any:  # noqa: PLR0911, PLR0912
    if isinstance(value, str) and tp is not Any:
        try:
            value = expand_env(value)
        except KeyError as missing:
            raise doc.error(path, f"environment variable {missing.args[0]} is not set and has no default") from None
    origin = get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, doc, path)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if value is None:
            if len(options) < len(get_args(tp)):
                return None
            raise doc.error(path, "a value is required")
        if len(options) == 1:  # X | None: X's own error, at the key inside it that is wrong
            return _convert(options[0], value, doc, path)
        errors: list[str] = []
        for option in options:
            converted = _try_convert(option, value, doc, path, errors)
            if converted is not _FAILED:
                return converted
        raise doc.error(path, " or ".join(errors))
    if origin is Literal:
        if value not in get_args(tp):
            raise doc.error(path, f"must be one of {', '.join(map(repr, get_args(tp)))}, not {value!r}")
        return value
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise doc.error(path, f"must be a list, not {_kind(value)}")
        return [_convert(item, v, doc, (*path, i)) for i, v in enumerate(value)]
    if origin is dict:
        key_tp, item = get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            raise doc.error(path, f"must be a mapping, not {_kind(value)}")
        return {_convert(key_tp, k, doc, path): _convert(item, v, doc, (*path, k)) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise doc.error(path, f"must be true or false, not {value!r}")
        return value
    if tp is int:
        return _int(value, doc, path)
    if tp is float:
        return _float(value, doc, path)
    if tp is str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise doc.error(path, f"must be a string, not {_kind(value)}")
        return str(value)
    if tp is Path:
        return Path(os.path.expanduser(_convert(str, value, doc, path)))
    raise doc.error(path, f"unsupported option type {tp!r}")


_FAILED = object()


def _try_convert(tp: Any, value: Any, doc: Document, path: KeyPath, errors: list[str]) -> Any:
    try:
        return _convert(tp, value, doc, path)
    except ConfigError as exc:
        errors.append(exc.message)
        return _FAILED


def _int(value: Any, doc: Document, path: KeyPath) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return parse_size(value)
        except ValueError:
            pass
    raise doc.error(path, f"must be a whole number (sizes such as '1MiB' are accepted), not {value!r}")


def _float(value: Any, doc: Document, path: KeyPath) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_duration(value, bare_seconds=True)
        except ValueError:
            pass
    raise doc.error(path, f"must be a number (durations such as '250ms' or '5s' are accepted), not {value!r}")


def _dataclass(cls: type, value: Any, doc: Document, path: KeyPath) -> Any:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise doc.error(path, f"must be a mapping, not {_kind(value)}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in value:
        if key not in known:
            suggestion = ", ".join(sorted(known)) or "none"
            raise doc.error((*path, key), f"unknown key (known keys: {suggestion})")
    kwargs = {}
    for name, spec in known.items():
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], doc, (*path, name))
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise doc.error(path, f"missing required key {name!r}")
    try:
        return cls(**kwargs)
    except FieldError as exc:  # __post_init__ validation of one field
        raise doc.error((*path, exc.field), str(exc)) from None
    except (ValueError, TypeError) as exc:  # __post_init__ validation
        raise doc.error(path, str(exc)) from None


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "nothing"}.get(
        type(value), type(value).__name__
    )
