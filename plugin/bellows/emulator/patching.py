"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), as the API server applies them.

Custom resources accept exactly these two; a strategic merge patch is answered with 415
by the server module. Both functions return a new document and never modify their inputs;
a patch that cannot apply raises :class:`PatchError` with the offending operation.

The API server's bounds on JSON patches hold here too: at most 10 000 operations
(:func:`check_json_patch`, 413 beyond), and ``copy`` operations that copy more than 3 MiB in
all are refused (evanphx/json-patch's ``AccumulatedCopySizeLimit``), so that a short patch
cannot double a document until memory runs out.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = [
    "MAX_COPY_BYTES",
    "MAX_OPERATIONS",
    "PatchError",
    "check_json_patch",
    "json_patch",
    "merge_patch",
]

MAX_OPERATIONS: Final = 10_000  # maxJSONPatchOperations in kube-apiserver
MAX_COPY_BYTES: Final = 3 * 1024 * 1024
_OPS = ("add", "remove", "replace", "move", "copy", "test")
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")  # ASCII digits, no leading zero


class PatchError(ValueError):
    """A patch is malformed or does not apply to the document (``too_large``: past a bound)."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def check_json_patch(operations: object) -> None:
    """:class:`PatchError` unless ``operations`` is a well-formed JSON patch within bounds:
    a list of objects, each with a known ``op``, a string ``path`` (and ``from``), and a
    ``value`` where the op needs one."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    if len(operations) > MAX_OPERATIONS:
        raise PatchError(
            f"The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, "
            f"got {len(operations)}",
            too_large=True,
        )
    for i, op in enumerate(operations):
        if not isinstance(op, Mapping) or op.get("op") not in _OPS:
            raise PatchError(f"operation {i} needs an 'op' in {_OPS}")
        if not isinstance(op.get("path"), str):
            raise PatchError(f"operation {i} ({op['op']}) needs a string 'path'")
        if op["op"] in ("move", "copy") and not isinstance(op.get("from"), str):
            raise PatchError(f"operation {i} ({op['op']}) needs a string 'from'")
        if op["op"] in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {i} ({op['op']}) needs 'value'")


def merge_patch(target: object, patch: object) -> Any:
    """``target`` with the RFC 7386 merge ``patch`` applied: ``null`` deletes, lists replace."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out: dict[str, Any] = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: object) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchError(f"path {path!r} is not a JSON pointer (expected '' or '/a/b')")
    if path == "":
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not _ARRAY_INDEX.fullmatch(token):  # str.isdigit() would pass "²", which int() refuses
        raise PatchError(f"array index {token[:40]!r} is not a non-negative integer")
    index = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} is out of range (length {len(container)})")
    return index


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for token in parts[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path segment {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"path segment {token!r} goes through a scalar")
    return node


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path segment {last!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise PatchError(f"path segment {last!r} goes through a scalar")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError(f"cannot add {last!r} under a scalar")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"cannot remove missing member {last!r}")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, allow_end=False)]
    else:
        raise PatchError(f"cannot remove {last!r} from a scalar")
    return doc


def json_patch(target: object, operations: object) -> Any:
    """``target`` with the RFC 6902 ``operations`` applied, all or nothing."""
    try:
        return _apply(target, operations)
    except RecursionError:  # adds and copies nested the document past what can be walked
        raise PatchError("Unable to complete JSON patch: the document nests too deep") from None


def _apply(target: object, operations: object) -> Any:
    if not isinstance(operations, Sequence) or isinstance(operations, str | bytes):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    copied = 0
    for i, op in enumerate(operations):
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise PatchError(f"operation {i} needs 'op' and 'path': {op!r}")
        parts = _pointer(op["path"])
        kind = op["op"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {i} ({kind}) needs 'value'")
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, parts)
        elif kind == "replace":
            _get(doc, parts)
            doc = (
                _add(_remove(doc, parts), parts, copy.deepcopy(op["value"]))
                if parts
                else op["value"]
            )
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from"))
            value = copy.deepcopy(_get(doc, source))
            if kind == "copy":
                copied += len(json.dumps(value))
                if copied > MAX_COPY_BYTES:
                    raise PatchError(
                        f"Unable to complete JSON patch: the copies exceed {MAX_COPY_BYTES} bytes"
                    )
            if kind == "move":
                doc = _remove(doc, source)
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _get(doc, parts) != op["value"]:
                raise PatchError(f"test failed at {op['path']}: value is not {op['value']!r}")
        else:
            raise PatchError(f"operation {i} has unknown op {kind!r}")
    return doc
