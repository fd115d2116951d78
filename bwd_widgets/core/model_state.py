"""The user's model, and what its forward writes to, left as they were after a capture.

A capture runs the model's forward under torch's tracers: a forward that fills a cache on first use
(`self._table = torch.arange(n).sin()`, a class-level or module-level dict of rotary tables) keeps a torch.fx
`Proxy` or a `FakeTensor` there, and the user's next eager call fails; a forward that counts its calls
(`self.calls += 1`) or logs (`self.log.append(...)`) is left counted. So `left_as_it_was` takes, before the
capture, what a forward can write to without torch knowing: every module's attribute table and the attribute
tables of the model's own classes (those outside torch and Python's standard library), each list, dict or set
among their values copied one level deep; and the lists, dicts and sets among the globals of the modules those
classes' methods are defined in (a module-level cache). A plain function given as the model is the user's own
code run as asked (the `%%bwd_extract` cell): its globals are left to it. After the capture it puts back every entry of those tables
that was added, rebound or changed in place, and the contents of those containers. A module's globals are not
rebound or pruned: in a notebook they are the user's own namespace, which a cell running beside a background
capture may change. Tensors a forward changes in place (batch-norm statistics) are put back by the capture
itself (`CaptureSession.restore_mutated`).
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Iterator, MutableMapping

_MISSING = object()
_CONTAINERS = (list, dict, set)


def _foreign(owner: object) -> bool:
    """torch's own code, Python's standard library and this package: what a user's forward does not write to."""
    top = (getattr(owner, "__module__", None) or getattr(owner, "__name__", "") or "").partition(".")[0]
    return top in ("torch", "bwd_widgets", "builtins") or top in sys.stdlib_module_names


def _container(value: object) -> bool:
    """A plain list, dict or set: a subclass may compute its items when read (transformers' `ACT2FN` makes an
    instance per lookup), so only these are copied and compared."""
    return type(value) in _CONTAINERS


def _contents(value: object) -> object:
    """A one-level copy of a container (its elements by identity)."""
    return type(value)(value)  # type: ignore[call-arg]  # list, dict or set: each copies its own kind


def _same_contents(value: object, kept: object) -> bool:
    if isinstance(value, list) and isinstance(kept, list):
        return len(value) == len(kept) and all(a is b for a, b in zip(value, kept))
    if isinstance(value, dict) and isinstance(kept, dict):
        return value.keys() == kept.keys() and all(value[k] is kept[k] for k in kept)
    return value == kept


def _refill(value: Any, kept: Any) -> None:
    """Put a container's contents back in place (the user's references to it stay valid)."""
    if isinstance(value, list):
        value[:] = kept
    else:
        value.clear()
        value.update(kept)


class _Table:
    """One attribute table as it was: its entries, and a one-level copy of each container among them."""

    def __init__(self, table: MutableMapping[str, Any] | Any, owner: object = None, entries: bool = True) -> None:
        """`owner`: the class whose (read-only) table this is; `entries=False`: only the containers' contents."""
        self.table, self.owner, self.rebinds = table, owner, entries
        self.entries = dict(table)
        self.contents = {k: _contents(v) for k, v in self.entries.items() if _container(v)}

    def put_back(self) -> None:
        now = dict(self.table)
        if self.rebinds:
            for key in now.keys() - self.entries.keys():
                self._set(key, _MISSING)
            for key, value in self.entries.items():
                if now.get(key, _MISSING) is not value:
                    self._set(key, value)
        for key, kept in self.contents.items():
            value = self.entries[key]
            if not _same_contents(value, kept):
                _refill(value, kept)

    def _set(self, key: str, value: object) -> None:
        if self.owner is not None:  # a class: its table is read-only, its attributes are set on it
            if value is _MISSING:
                delattr(self.owner, key)
            else:
                setattr(self.owner, key, value)
        elif value is _MISSING:
            del self.table[key]
        else:
            self.table[key] = value


def _tables(model: object) -> list[_Table]:
    modules = list(model.modules()) if isinstance(model, torch.nn.Module) else []
    tables = [_Table(vars(m)) for m in modules]
    classes = {id(c): c for m in modules for c in type(m).__mro__ if not _foreign(c)}
    if not isinstance(model, torch.nn.Module) and not _foreign(type(model)):
        classes.update((id(c), c) for c in type(model).__mro__ if not _foreign(c))
    tables += [_Table(vars(c), owner=c) for c in classes.values()]
    namespaces: dict[int, dict[str, Any]] = {}
    functions = [f for c in classes.values() for f in vars(c).values() if callable(f)]
    for function in functions:
        namespace = getattr(getattr(function, "__func__", function), "__globals__", None)
        if isinstance(namespace, dict) and not _foreign(sys.modules.get(namespace.get("__name__", ""))):
            namespaces[id(namespace)] = namespace
    tables += [_Table(n, entries=False) for n in namespaces.values()]
    return tables


@contextlib.contextmanager
def left_as_it_was(model: object) -> Iterator[None]:
    """Run a capture of `model`; afterwards, however it ended, its modules, classes and the globals their code
    reads hold what they held before (see the module docstring)."""
    tables = _tables(model)
    try:
        yield
    finally:
        for table in tables:
            table.put_back()
