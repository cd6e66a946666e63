"""Records: what the tests rely on, and what it is made of, built once by ``install``.

Contract: a record is ``(kind, target, key, expected, label)``; the kinds are the constants
below, each saying what must still hold (``grading.guard.recheck`` compares them again, the
audit hook its own core). ``_Recorder`` builds them from the watched objects, following the
names their code uses: a function's code, defaults, keyword defaults, closure, globals and the
builtins it uses, ``__wrapped__``, the attributes of the modules and classes it reaches and the
virtual subclasses of the abstract classes among them (installed libraries two calls deep,
course code all the way). It keeps every recorded object alive, so that no id is reused, and
stops at ``_MAX_RECORDS``. ``_hook_lists`` names IPython's lists and tables of code it runs
around cells and outputs. Nothing here runs at import time beyond defining these.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from grading.guard.trust import _installed_file
from grading.guard.watchlist import PROCESS_STATE

Record = tuple[int, Any, Any, Any, str]  # (kind, target, key, expected, label)

_LIBRARY_DEPTH = 2  # how far the record follows installed libraries' functions (course code: all the way)
_MAX_RECORDS = 12_000


class _Missing:
    """What a record expects where there is nothing (an absent name): never equal to a value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
_NO_CODES: frozenset[int] = frozenset()  # the code objects of the test running, when none runs

# kinds of record: (kind, target, key, expected, label)
_ITEM = 0  # target.get(key) is expected (a module's, class's, instance's or builtins' dictionary)
_ATTR = 1  # getattr(target, key) is expected (a function's __code__, __defaults__, ...)
_CELL = 2  # a closure cell still holds expected
_SNAP = 3  # a dict, list or set still holds exactly the objects in expected
_OPTIONAL = 4  # target.get(key) is expected or absent (a name of the notebook's namespace)
_ADDED = 5  # getattr(target, key) (a list or dict of hooks) gained nothing from the submission's code
_ABC = 6  # no class of the submission's was registered as a virtual subclass of target


def _names(code: types.CodeType) -> set[str]:
    """Every global and attribute name a code object and the code nested in it use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _contents(value: Any) -> tuple[Any, ...]:
    """What a dict (its items), list or set holds, as a tuple (a snapshot's ``expected``)."""
    if isinstance(value, dict):
        return tuple(value.items())
    return tuple(value)


def _same_contents(value: object, expected: tuple[Any, ...]) -> bool:
    """Whether ``value`` holds the very objects of a snapshot (dict keys by equality, the rest by identity)."""
    now = _contents(value)
    if len(now) != len(expected):
        return False
    for a, b in zip(now, expected, strict=True):
        if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2:
            if a[0] != b[0] or a[1] is not b[1]:
                return False
        elif a is not b:
            return False
    return True


def _cell_contents(cell: types.CellType) -> object:
    """What a closure cell holds (``_MISSING`` when empty)."""
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


def _hook_lists(shell: Any) -> list[tuple[Any, str, str]]:
    """(owner, attribute, label) of IPython's lists and tables of code it runs around cells and outputs."""
    found: list[tuple[Any, str, str]] = []
    for name in ("ast_transformers", "input_transformers_cleanup", "input_transformers_post"):
        if isinstance(getattr(shell, name, None), list):
            found.append((shell, name, "IPython's input or AST transformers (code that rewrites cells)"))
    manager = getattr(shell, "input_transformer_manager", None)
    for name, value in vars(manager).items() if manager is not None else ():
        if isinstance(value, list):
            found.append((manager, name, "IPython's input or AST transformers (code that rewrites cells)"))
    events = getattr(getattr(shell, "events", None), "callbacks", None)
    for event in events or {}:
        found.append((events, event, "IPython event callbacks (code that runs around each cell)"))
    for owner in (getattr(shell, "displayhook", None), getattr(shell, "display_pub", None)):
        if isinstance(getattr(owner, "_hooks", None), list):
            found.append((owner, "_hooks", "IPython's display hooks (code that rewrites a cell's results)"))
    formatter = getattr(shell, "display_formatter", None)
    for mime, printer in (getattr(formatter, "formatters", None) or {}).items():
        for table in ("type_printers", "deferred_printers", "singleton_printers"):
            if isinstance(getattr(printer, table, None), dict):
                found.append((printer, table, f"IPython's {mime} formatters (code that writes a cell's results)"))
    return found


class _Recorder:
    """Builds the records of what a set of objects is made of, following the names their code uses."""

    def __init__(self, roots: tuple[str, ...], course: tuple[str, ...]) -> None:
        self.roots = roots
        self.course = course
        self.records: list[Record] = []
        self.functions: list[types.FunctionType] = []  # the functions whose code and defaults are protected
        self.labels: dict[int, str] = {}
        self._keys: set[tuple[int, object]] = set()
        self._seen: set[object] = set()
        self._keep: list[object] = []  # keeps every recorded object alive, so that no id is reused

    def add(self, kind: int, target: object, key: object, expected: object, label: str) -> None:
        """One record (once per target and key), while fewer than ``_MAX_RECORDS`` are kept."""
        marker = (id(target), key if kind in (_ITEM, _ATTR, _OPTIONAL, _ADDED) else kind)
        if marker in self._keys or len(self.records) >= _MAX_RECORDS:
            return
        self._keys.add(marker)
        self._keep.append(target)
        self.records.append((kind, target, key, expected, label))

    def in_course(self, code: types.CodeType) -> bool:
        """Whether ``code`` is the course's own (followed all the way down, not two calls deep)."""
        return _installed_file(code.co_filename, self.course)

    # -- attributes -----------------------------------------------------------------------

    def attribute(self, owner: Any, name: str, label: str) -> object:
        """Record where ``owner.name`` comes from (instance, class and bases, or module): nothing may shadow it."""
        if isinstance(owner, types.ModuleType):
            found = vars(owner).get(name, _MISSING)
            self.add(_ITEM, vars(owner), name, found, label)
            return found
        classes = owner.__mro__ if isinstance(owner, type) else type(owner).__mro__
        if not isinstance(owner, type) and isinstance(getattr(owner, "__dict__", None), dict):
            self.add(_ITEM, owner.__dict__, name, owner.__dict__.get(name, _MISSING), label)
            traits = owner.__dict__.get("_trait_values")  # traitlets keeps a trait's value here, not in __dict__
            if isinstance(traits, dict) and name in traits:
                self.add(_ITEM, traits, name, traits[name], label)
                return traits[name]
        for klass in classes:
            found = vars(klass).get(name, _MISSING)
            self.add(_ITEM, vars(klass), name, found, label)
            if found is not _MISSING:
                return found
        return _MISSING

    # -- values -------------------------------------------------------------------------

    def value(self, value: object, label: str, depth: int, names: set[str]) -> None:
        """Follow ``value`` (reached by code that uses ``names``) when it is code, a module or a class."""
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, types.MethodType):
            value = value.__func__
        if isinstance(value, property):
            for part in (value.fget, value.fset, value.fdel):
                if part is not None:
                    self.value(part, label, depth, names)
            return
        if isinstance(value, types.FunctionType):
            self.function(value, label, depth)
        elif isinstance(value, types.ModuleType):
            self.module(value, label, depth, names)
        elif isinstance(value, type):
            self.klass(value, label, depth, names)
        elif type(value).__name__ == "partial" and callable(func := getattr(value, "func", None)):
            self.value(func, label, depth, names)

    def module(self, module: types.ModuleType, label: str, depth: int, names: set[str]) -> None:
        """The module's code and submodules that ``names`` reach (its data may change as it works)."""
        space = vars(module)
        for name in sorted(names & space.keys() - (PROCESS_STATE if module is sys else set())):
            found = space[name]
            if not (callable(found) or isinstance(found, types.ModuleType)):
                continue  # a library's data may change as it works; its code may not
            self.add(_ITEM, space, name, found, f"{module.__name__}.{name}")
            if (id(module), name) not in self._seen:
                self._seen.add((id(module), name))
                self.value(found, f"{module.__name__}.{name}", depth, names)

    def klass(self, cls: type, label: str, depth: int, names: set[str]) -> None:
        """The class's attributes that ``names`` reach, its metaclass's checks and its virtual subclasses."""
        qualified = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', '?')}"
        for name in sorted(names):  # each code that reaches the class: the attributes it uses
            if (id(cls), name) in self._seen or not any(name in vars(k) for k in cls.__mro__):
                continue
            self._seen.add((id(cls), name))
            found = self.attribute(cls, name, f"{qualified}.{name}")
            if depth < _LIBRARY_DEPTH:
                self.value(found, f"{qualified}.{name}", depth + 1, names)
        meta = type(cls)
        if meta is not type:
            for name in ("__instancecheck__", "__subclasscheck__"):
                self.attribute(meta, name, f"{qualified}'s {name}")
        if hasattr(cls, "_abc_impl"):
            import _abc

            registered = frozenset(id(ref()) for ref in _abc._get_dump(cls)[0])
            self.add(_ABC, cls, None, registered, f"the virtual subclasses of {qualified} (ABC.register)")

    def function(self, function: types.FunctionType, label: str, depth: int) -> None:
        """A function's make-up (protected: its code and defaults), then what its code uses, as ``label``."""
        code = function.__code__
        course = self.in_course(code)
        if id(function) in self._seen or (not course and depth > _LIBRARY_DEPTH):
            return
        self._seen.add(id(function))
        self.functions.append(function)  # the audit hook refuses to replace its code, defaults and keyword defaults
        self.labels[id(function)] = label
        keywords = function.__kwdefaults__
        if keywords is not None:  # ... but not to change that dict in place
            self.add(_SNAP, keywords, None, _contents(keywords), f"the keyword defaults of {label}")
        attributes = function.__dict__
        if course:
            self.add(_SNAP, attributes, None, _contents(attributes), f"the attributes of {label} (__wrapped__, ...)")
        else:
            self.add(_ITEM, attributes, "__wrapped__", attributes.get("__wrapped__", _MISSING), f"{label}.__wrapped__")
        names = _names(code)
        step = depth if course else depth + 1
        for cell in function.__closure__ or ():
            held = _cell_contents(cell)
            self.add(_CELL, cell, None, held, f"a variable {label} closes over")
            self.value(held, label, step, names)
        for default in (*(function.__defaults__ or ()), *(keywords or {}).values()):
            self.value(default, label, step, names)
        if "__wrapped__" in attributes:
            self.value(attributes["__wrapped__"], f"{label}.__wrapped__", step, names)
        space = function.__globals__
        builtins = space.get("__builtins__")
        builtins = vars(builtins) if isinstance(builtins, types.ModuleType) else builtins
        where = space.get("__name__", "?")
        for name in sorted(names):
            if name in space:
                found = space[name]
                if course or callable(found) or isinstance(found, types.ModuleType):
                    self.add(_ITEM, space, name, found, f"{where}.{name}")
                    if course and isinstance(found, list | dict | set):
                        self.add(_SNAP, found, None, _contents(found), f"what {where}.{name} holds")
                    self.value(found, f"{where}.{name}", step, names)
            elif isinstance(builtins, dict) and name in builtins:
                self.add(_ITEM, space, name, _MISSING, f"{where}.{name} (a global that would hide the builtin)")
                self.add(_ITEM, builtins, name, builtins[name], f"builtins.{name}")
