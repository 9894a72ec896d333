"""Where configuration values come from: the file, ``BELLOWS_*`` env variables and
``--set`` flags, each value converted and bounded by its key's field.

:class:`Sources` reads them for one configuration class (:class:`~bellows.service.config.
BellowsConfig`); :func:`~bellows.service.config.load_config` merges them in that order
over the defaults. An unknown key, section or variable is an error naming it and where it
came from, never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bellows.service.config_fields import (
    ENV_PREFIX,
    ConfigError,
    InvalidValueError,
    Leaf,
    convert,
    leaves,
    sections,
)
from bellows.service.config_files import read_config_file

__all__ = ["Sources"]

_Values = dict[tuple[str, ...], tuple[Any, str]]  # attribute path: (value, where it came from)


class Sources:
    """The keys of ``root`` (a dataclass of sections) and how to read each source of them."""

    def __init__(self, root: type) -> None:
        self.root = root
        self.leaves: dict[tuple[str, ...], Leaf] = {leaf.keys: leaf for leaf in leaves(root)}
        self._by_env: dict[str, Leaf] = {leaf.env: leaf for leaf in self.leaves.values()}
        self._section_env = tuple(
            f"{ENV_PREFIX}{leaf.env.removeprefix(ENV_PREFIX).split('_')[0]}_"
            for leaf in self.leaves.values()
            if len(leaf.keys) > 1
        )

    def from_file(self, path: Path, values: _Values) -> None:
        source = f"file {path}"
        data = read_config_file(path)
        if data is None:
            return
        if not isinstance(data, dict):
            raise ConfigError("<root>", type(data).__name__, "a mapping of sections", source)
        self._walk(data, self.root, (), values, source)

    def _walk(
        self,
        data: Mapping[Any, Any],
        cls: type,
        keys: tuple[str, ...],
        values: _Values,
        source: str,
    ) -> None:
        known = {key: hint for key, _, hint, _ in sections(cls)}
        for key, raw in data.items():
            path = (*keys, str(key))
            if key not in known:
                valid = "one of " + ", ".join(sorted(known))
                raise ConfigError(".".join(path), "<unknown key>", valid, source)
            leaf = self.leaves.get(path)
            if leaf is None:  # a section
                if not isinstance(raw, dict):
                    raise ConfigError(".".join(path), raw, "a mapping (a section)", source)
                self._walk(raw, known[key], path, values, source)
            else:
                _set(values, leaf, raw, source, text=False)

    def from_env(self, env: Mapping[str, str], values: _Values) -> None:
        for name in sorted(env):
            leaf = self._by_env.get(name)
            if leaf is not None:
                _set(values, leaf, env[name], f"env {name}", text=True)
            elif name.startswith(self._section_env):
                # Looks meant for a section but matches no key: a typo must not pass silently.
                raise ConfigError(
                    name,
                    "<unknown variable>",
                    "one of the env names in docs/configuration.md",
                    f"env {name}",
                )

    def from_flags(self, overrides: Sequence[str], values: _Values) -> None:
        for item in overrides:
            key, sep, raw = item.partition("=")
            source = f"flag --set {key}"
            leaf = self.leaves.get(tuple(key.split(".")))
            if not sep or leaf is None:
                valid = "KEY=VALUE with KEY one of the keys in docs/configuration.md"
                raise ConfigError(key or item, "<unknown key>" if sep else item, valid, source)
            _set(values, leaf, raw, source, text=True)


def _set(values: _Values, leaf: Leaf, raw: object, source: str, *, text: bool) -> None:
    try:
        values[leaf.attrs] = (convert(leaf.hint, raw, from_text=text, bounds=leaf.bounds), source)
    except InvalidValueError as exc:
        masked = "********" if leaf.secret else raw
        raise ConfigError(leaf.dotted, masked, exc.valid, source) from None
