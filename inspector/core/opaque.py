"""`Opaque`: a Python object a checkpoint describes but that is never rebuilt, kept inert.

A PyTorch Lightning checkpoint holds, beside its tensors, the objects of its training code:
omegaconf `DictConfig` / `ListConfig`, `argparse.Namespace`, paths, enums. Rebuilding them would
import and call that code; refusing them would refuse the file. An `Opaque` is neither: the
dotted name of the object's class and the plain data the file holds for it, nothing callable.
It is a leaf: ops refuse it (naming its key path), `describe` gives it kind `"opaque"`,
`diff` compares it by `type` and `state`.
"""

from __future__ import annotations

from typing import Any

BACK_REFERENCE = "(refers back to an enclosing object)"
"""The `state` of an `Opaque` that stands for an object enclosing it (omegaconf's `_parent`):
the file's object graph has a cycle there, and an `Opaque` tree has none."""


class Opaque:
    """An object of a checkpoint's own classes, described, never imported or called.

    Attributes:
        type: the dotted name of its class as the file spells it
            (`"omegaconf.listconfig.ListConfig"`).
        state: what the file holds for it: plain dicts, lists, strings, numbers, arrays and
            nested `Opaque`s. For an object rebuilt from arguments (`PosixPath("a", "b")`,
            `Color(1)`) the arguments (one argument alone); for one restored from its
            attributes (`__setstate__`, `__dict__`) those; for a dict or list subclass its
            items; several of these as `{"args": ..., "state": ..., "items": ...}`. `None` for
            a bare reference to a class or function (`typing.Any`).

    >>> o = Opaque("omegaconf.listconfig.ListConfig", {"_content": [
    ...     Opaque("omegaconf.nodes.AnyNode", {"_val": 64}),
    ...     Opaque("omegaconf.nodes.AnyNode", {"_val": 10})]})
    >>> o.summary(), o.plain()
    ('‹ListConfig› [2 items]', [64, 10])
    >>> o == Opaque("omegaconf.listconfig.ListConfig", o.state)
    True
    """

    __slots__ = ("type", "state")

    def __init__(self, type: str, state: Any = None):  # noqa: A002 (the attribute's name)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "state", state)

    def __setattr__(self, name, value):
        raise AttributeError(f"an Opaque ({self.type}) is read-only")

    def __eq__(self, other) -> bool:
        if not isinstance(other, Opaque):
            return NotImplemented
        return self.type == other.type and _same(self.state, other.state)

    __hash__ = None  # its state may hold dicts and lists

    def __repr__(self) -> str:
        return f"Opaque({self.type!r}, {self.state!r:.200})"

    @property
    def name(self) -> str:
        """The class name without its module (`"ListConfig"`)."""
        return self.type.rsplit(".", 1)[-1]

    def plain(self) -> Any:
        """Returns its content as plain Python: dicts, lists, strings, numbers (arrays kept).

        omegaconf's containers and nodes read as what they hold (a `ListConfig` as its list,
        an `AnyNode` as its value); other objects as their state, nested `Opaque`s likewise.
        """
        return _plain(self, 0)

    def summary(self) -> str:
        """`‹ListConfig› [3 items]`, `‹DictConfig› {2 keys}`, `‹Any›`; an object holding arrays
        (a whole pickled model) says how many: `‹Linear› {9 keys} · 2 arrays inside`."""
        content = self.plain()
        head = f"\u2039{self.name}\u203a"
        arrays = _count_arrays(self.state, 0)  # tensors kept inside an object (a whole model)
        tail = f" \u00b7 {arrays:,} array{'' if arrays == 1 else 's'} inside" if arrays else ""
        if isinstance(content, list | tuple):
            return f"{head} [{len(content):,} item{'' if len(content) == 1 else 's'}]{tail}"
        if isinstance(content, dict):
            return f"{head} {{{len(content):,} key{'' if len(content) == 1 else 's'}}}{tail}"
        if content is None:
            return head + tail
        return f"{head} {_short(content)}{tail}"


_MAX_PLAIN_DEPTH = 64


def _plain(value: Any, depth: int) -> Any:
    if depth > _MAX_PLAIN_DEPTH:
        return "…"
    if isinstance(value, Opaque):
        state = value.state
        if isinstance(state, dict) and "_content" in state:  # omegaconf containers
            return _plain(state["_content"], depth + 1)
        if isinstance(state, dict) and "_val" in state:  # omegaconf value nodes
            return _plain(state["_val"], depth + 1)
        return _plain(state, depth + 1)
    if isinstance(value, dict):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    return value


def _count_arrays(value: Any, depth: int) -> int:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return 1
    if depth > _MAX_PLAIN_DEPTH:
        return 0
    if isinstance(value, Opaque):
        return _count_arrays(value.state, depth + 1)
    if isinstance(value, dict):
        return sum(_count_arrays(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_count_arrays(v, depth + 1) for v in value)
    return 0


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _same(a: Any, b: Any) -> bool:
    # arrays inside a state compare by value; `==` on them would be elementwise
    if hasattr(a, "shape") or hasattr(b, "shape"):
        import numpy as np

        try:
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        except (TypeError, ValueError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # NaN hyper-parameters: the same value on both sides
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False
