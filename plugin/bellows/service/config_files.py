"""Reading a configuration file: bounded, UTF-8, plain YAML, every problem a clear error.

The file comes from a ConfigMap, a volume or a person's editor, so it is read like any other
outside input: at most :data:`MAX_CONFIG_BYTES`, strict UTF-8, nesting at most
:data:`MAX_CONFIG_DEPTH` deep (PyYAML's composer recurses, and 100 000 ``[`` would exhaust
the stack), no aliases (``*name`` lets a small file expand into a huge document) and no key
given twice (YAML would keep the last one silently). Whatever the YAML library raises on a
value no check foresaw (``2001-13-45``, ``!!int x``) becomes the same
:class:`~bellows.service.config_fields.ConfigError`, naming the file and, where YAML knows
it, the line.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node

from bellows.inputs import DATA_ERRORS, brief
from bellows.service.config_fields import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH", "read_config_file"]

MAX_CONFIG_BYTES: Final = 1 << 20  # the chart's file is about 1 KiB
MAX_CONFIG_DEPTH: Final = 16  # the schema nests 3 deep; a node selector adds one
_MAX_SCALAR_DIGITS: Final = 64  # an int64 has 19; anything longer is refused, not parsed


class _RefusedError(yaml.MarkedYAMLError):  # type: ignore[misc]  # PyYAML has no types
    """A construct this loader does not take; carries the place it was found."""


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]
    """``yaml.SafeLoader`` with a nesting limit, no aliases and no duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: object) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _RefusedError(
                problem="an alias (*name): anchors are not allowed", problem_mark=mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                mark = self.peek_event().start_mark
                raise _RefusedError(
                    problem=f"nesting deeper than {MAX_CONFIG_DEPTH} levels", problem_mark=mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable):
                if key in seen:
                    raise _RefusedError(
                        problem=f"the key {key!r} is given twice", problem_mark=key_node.start_mark
                    )
                seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _bounded_int(loader: yaml.SafeLoader, node: Node) -> int:
    text = str(node.value)
    if sum(c.isdigit() for c in text) > _MAX_SCALAR_DIGITS:
        # int() of 5000 digits raises (or, below Python's limit, is merely absurd)
        raise _RefusedError(
            problem=f"an integer of {len(text)} characters", problem_mark=node.start_mark
        )
    value: int = loader.construct_yaml_int(node)
    return value


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def _where(err: yaml.YAMLError) -> str:
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        problem = err.problem or err.context or "invalid YAML"
        if mark is not None:
            return f"line {mark.line + 1} column {mark.column + 1}: {problem}"
        return str(problem)
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def read_config_file(path: Path) -> Any:
    """The YAML document in ``path``, or :class:`ConfigError` naming the file and the cause."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError("--config", path, f"a readable file ({exc.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError("--config", path, f"a file of at most {MAX_CONFIG_BYTES} bytes")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "--config", path, f"a UTF-8 text file (byte {exc.start} is not UTF-8)"
        ) from None
    try:
        loader = _BoundedLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise ConfigError("--config", path, f"valid YAML ({_where(exc)})") from None
    except DATA_ERRORS as exc:  # a value YAML matched by pattern but could not build
        raise ConfigError("--config", path, f"valid YAML ({brief(exc)})") from None
