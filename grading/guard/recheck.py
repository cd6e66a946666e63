"""Comparing the records again: which no longer hold, and what else the tests rely on.

Contract: ``_changed(records, roots, cache)`` returns the labels of the records (see
``grading.guard.records``) that no longer hold, in order, each once; ``_grouped`` prepares a
set of records for the fast path the audit hook takes at every check (``_items_changed``:
one pass of C code per kind of dictionary; ``_snaps_changed``: identity first); ``_problems``
what else the tests rely on that is no table of records: IPython's transformer and exception
handler, the trace and profile functions, torch's modes, threads and signal handlers. Every
comparison is by identity: an object's own ``__eq__`` is never asked.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from grading.guard.records import (
    _ABC,
    _ADDED,
    _ATTR,
    _CELL,
    _ITEM,
    _MISSING,
    _OPTIONAL,
    _SNAP,
    Record,
    _cell_contents,
    _same_contents,
)
from grading.guard.trust import _defined_in_installed_code, _installed_file, _trusted

if TYPE_CHECKING:
    from grading.guard.state import _State


def _changed(records: Iterable[Record], roots: tuple[str, ...], cache: dict[str, bool]) -> list[str]:
    """The labels of the records that no longer hold."""
    changed: list[str] = []
    for kind, target, key, expected, label in records:
        if kind == _ITEM:
            bad = target.get(key, _MISSING) is not expected
        elif kind == _ATTR:
            bad = getattr(target, key, _MISSING) is not expected
        elif kind == _OPTIONAL:
            now = target.get(key, _MISSING)
            bad = now is not _MISSING and now is not expected
        elif kind == _CELL:
            bad = _cell_contents(target) is not expected
        elif kind == _SNAP:
            bad = not _same_contents(target, expected)
        elif kind == _ADDED:
            bad = _untrusted_additions(target, key, expected, roots, cache)
        elif kind == _ABC:
            bad = _registered_untrusted(target, expected, roots, cache)
        else:
            bad = True
        if bad:
            changed.append(label)
    return list(dict.fromkeys(changed))


def _grouped(records: Iterable[Record]) -> tuple[tuple[Any, ...], tuple[Record, ...], tuple[Any, ...]]:
    """The item records of real dictionaries and class namespaces, by the type of their dictionary, as
    (that type's ``get``, dictionaries, keys, expected values, labels); the other records; and the
    snapshots, as (container, keys, values, record) for a dict and (container, items, record) otherwise."""
    groups: dict[Any, tuple[list[Any], list[Any], list[Any], list[Any]]] = {}
    rest: list[Record] = []
    snaps: list[tuple[Any, ...]] = []
    for record in records:
        kind, target, key, expected, label = record
        if kind == _SNAP:
            columns = tuple(zip(*expected, strict=True)) if isinstance(target, dict) else (expected,)
            snaps.append((target, *(columns or ((), ())), record))
            continue
        if kind != _ITEM or type(target) not in (dict, types.MappingProxyType):
            rest.append(record)
            continue
        group = groups.setdefault(type(target), ([], [], [], []))
        for column, value in zip(group, (target, key, expected, label), strict=True):
            column.append(value)
    return tuple((kind.get, *map(tuple, group)) for kind, group in groups.items()), tuple(rest), tuple(snaps)


def _items_changed(groups: tuple[Any, ...]) -> list[str]:
    """The labels of the item records that no longer hold: one pass of C code per kind of dictionary, identity
    only (an object's own ``__eq__`` is never asked)."""
    import itertools
    import operator

    changed: list[str] = []
    for get, targets, keys, expected, labels in groups:
        if not all(map(operator.is_, map(get, targets, keys, itertools.repeat(_MISSING)), expected)):
            changed += [
                label
                for target, key, value, label in zip(targets, keys, expected, labels, strict=True)
                if get(target, key, _MISSING) is not value
            ]
    return changed


def _snaps_changed(snaps: tuple[Any, ...]) -> list[str]:
    """The labels of the snapshots that no longer hold: the same objects in the same order, compared by identity
    in C first; only a container that fails that is compared as ``_changed`` does (keys by equality)."""
    import operator

    changed: list[str] = []
    for target, *columns, record in snaps:
        same = len(target) == len(columns[0]) and all(map(operator.is_, target, columns[0]))
        if same and len(columns) == 2:
            same = all(map(operator.is_, target.values(), columns[1]))
        if not same and not _same_contents(target, record[3]):
            changed.append(record[4])
    return changed


def _untrusted_additions(
    owner: Any, key: str, baseline: tuple[Any, ...], roots: tuple[str, ...], cache: dict[str, bool]
) -> bool:
    """Whether a list or table of hooks gained code of the submission's (a library's own is fine)."""
    now = owner.get(key, ()) if isinstance(owner, dict) else getattr(owner, key, ())
    if isinstance(now, dict):
        before = dict(baseline)
        return any(not _trusted(v, roots, cache) for k, v in now.items() if before.get(k, _MISSING) is not v)
    return any(not _trusted(item, roots, cache) for item in now if not any(item is old for old in baseline))


def _registered_untrusted(cls: type, before: frozenset[int], roots: tuple[str, ...], cache: dict[str, bool]) -> bool:
    """Whether a class of the submission's was registered as a virtual subclass of ``cls`` since ``install``.

    A library registers its classes as it is imported (sympy's ``Float`` as a ``numbers.Real``);
    what counts is the module that defines the class, not how its methods were made.
    """
    import _abc

    registry = _abc._get_dump(cls)[0]
    return any(
        (klass := ref()) is not None and id(klass) not in before and not _defined_in_installed_code(klass, roots, cache)
        for ref in registry
    )


def _modes() -> list[object]:
    """torch's active function and dispatch modes (``torch.set_default_device`` leaves one, say)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    modes = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
    return modes + [torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())]


def _problems(state: _State, roots: tuple[str, ...], cache: dict[str, bool]) -> list[str]:
    """What else the tests rely on: hooks that are not a table of IPython's, modes, threads, signals."""
    import signal
    import threading

    problems: list[str] = []
    if state.transformer not in state.shell.ast_transformers:
        problems.append("removed the grader's own AST transformer from IPython's (code that rewrites cells)")
    if getattr(state.shell, "custom_exceptions", ()) != ():
        problems.append("set an IPython custom exception handler (set_custom_exc)")
    hooks = [hook for hook in (sys.gettrace(), sys.getprofile()) if hook is not None]
    baseline = [hook for hook in state.trace if hook is not None]
    if any(not _trusted(h, roots, cache) for h in hooks if not any(h is old for old in baseline)):
        problems.append("set the interpreter's trace or profile function")
    if any(not _trusted(mode, roots, cache) for mode in _modes()):
        problems.append("left a mode of its own in torch's function or dispatch mode stack (a TorchFunctionMode)")
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():
        current: types.FrameType | None = frame
        while ident != me and current is not None:
            if not _installed_file(current.f_code.co_filename, roots, cache):
                problems.append(
                    "left a thread running its own code (it could change what the tests rely on while they run)"
                )
                break
            current = current.f_back
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (ValueError, OSError):
            continue
        if callable(handler) and not _trusted(handler, roots, cache):
            problems.append("set a signal handler of its own (code that can run at any moment)")
            break
    return list(dict.fromkeys(problems))
