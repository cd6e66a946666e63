"""Objects that lie: the checks every value a test uses passes through (README, "Objects that lie").

Contract: ``_Lying`` is a part of the guard's state (``grading.guard.state._State`` derives
from it and holds the attributes it reads, set by ``install``). ``inspect_value`` returns its
argument or raises ``GradingIntegrityError`` on an instance of a ``torch.Tensor`` subclass
defined outside installed code that redefines ``__torch_function__``, ``__torch_dispatch__``
or anything ``torch.Tensor`` has; a subclass of a plain value type so defined that redefines
how it compares or converts; any object whose class so defined implements torch's or numpy's
override protocols or redefines ``__class__`` (containers inspected to a depth of
``_MAX_DEPTH`` and ``_MAX_ITEMS`` items). ``compare`` and ``truth`` also refuse, against a
plain value, an object whose class so defined has its own comparison; they return what the
comparison or ``bool`` gives, computed by C code (``_OPERATORS``: nothing to rewrite).
"""

from __future__ import annotations

import operator
import sys
import types
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from grading.guard.protocol import GradingIntegrityError
from grading.guard.trust import _code_files, _installed_file

T = TypeVar("T")

_MAX_ITEMS = 10_000  # elements of one container inspected
_MAX_DEPTH = 6

# the single comparisons a test's ``assert`` may make, by their ``ast`` name: C functions (no code to replace),
# ``In`` and ``NotIn`` as ``operator.contains(container, item)``; read-only
_OPERATORS: types.MappingProxyType[str, Callable[[Any, Any], Any]] = types.MappingProxyType({
    "Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
    "GtE": operator.ge, "In": operator.contains, "NotIn": operator.contains,
})  # fmt: skip


class _Lying:
    """The checks on objects that lie, as methods of the guard's state (see the module's contract)."""

    __slots__ = ()
    # set by ``_State.__init__`` (slots of the state)
    plain: frozenset[type]
    containers: tuple[type, ...]
    value_bases: tuple[type, ...]
    tensor_types: tuple[type, ...]
    tensor_api: frozenset[str]
    protocol: frozenset[str]
    overrides: frozenset[str]
    compares: frozenset[str]
    installed_files: frozenset[str]
    roots: tuple[str, ...]

    def _class_verdict(self, cls: type) -> tuple[str | None, str | None]:
        """(why its values cannot be trusted anywhere, why they cannot be compared with plain values)."""
        anywhere = versus_plain = None
        is_value = any(issubclass(cls, base) for base in self.value_bases)
        is_tensor = bool(self.tensor_types) and issubclass(cls, self.tensor_types)
        for klass in cls.__mro__:
            if klass is object or klass in self.plain or klass in self.value_bases:
                continue
            names = set(vars(klass))
            module_name = getattr(klass, "__module__", None) or ""
            module = sys.modules.get(module_name)
            installed = self._installed(getattr(module, "__file__", None))
            defined_outside = module_name == "__main__" or not installed
            redefined = names & (self.tensor_api | self.protocol if is_tensor else self.protocol)
            if not defined_outside:
                redefined = {n for n in redefined if any(not self._installed(f) for f in _code_files(vars(klass)[n]))}
            if not redefined:
                continue
            shown = ", ".join(sorted(redefined)[:6])
            if "__class__" in redefined:
                anywhere = anywhere or "an object that lies about its class (its class redefines __class__)"
            elif is_tensor:
                anywhere = anywhere or f"a torch.Tensor subclass defined in the submission that redefines {shown}"
            elif is_value:
                kind = next(base.__name__ for base in self.value_bases if issubclass(cls, base))
                anywhere = anywhere or f"a subclass of {kind} defined in the submission that redefines {shown}"
            elif redefined & self.overrides:
                anywhere = anywhere or f"an object that overrides {', '.join(sorted(redefined & self.overrides))}"
            elif redefined & self.compares:
                versus_plain = versus_plain or f"an object whose class defines its own {shown}"
        return anywhere, versus_plain

    def _installed(self, filename: object) -> bool:
        """Whether a file is installed code: known at ``install`` (an immutable set), else asked of the disk."""
        if not isinstance(filename, str):
            return False
        return filename in self.installed_files or _installed_file(filename, self.roots)

    def _problem(self, value: Any, depth: int = 0) -> str | None:
        """Why ``value``, or a value it contains, cannot be trusted anywhere (None: nothing found)."""
        cls = type(value)
        if cls in self.plain:
            return None
        if cls in self.containers:
            if depth >= _MAX_DEPTH:
                return None
            items = value.items() if cls is dict else value
            for index, item in enumerate(items):
                if index >= _MAX_ITEMS:
                    break
                for part in item if cls is dict else (item,):
                    found = self._problem(part, depth + 1)
                    if found:
                        return found
            return None
        try:
            anywhere, _ = self._class_verdict(cls)
        except Exception:  # a class built to break introspection is itself a finding
            return f"an object of class {getattr(cls, '__name__', '?')} that resists inspection"
        if anywhere:
            return f"{anywhere} (class {cls.__qualname__})"
        return None

    def _fail(self, problem: str) -> NoReturn:
        """Fail the test: ``GradingIntegrityError`` saying what it received."""
        raise GradingIntegrityError(
            f"the test received {problem}: its comparisons cannot be trusted, so this test scores 0"
        )

    def inspect_value(self, value: T) -> T:
        """``value`` itself, unless it (or a value it contains) cannot be trusted anywhere."""
        if type(value) in self.plain:
            return value
        problem = self._problem(value)
        if problem:
            self._fail(problem)
        return value

    def _plain(self, value: object) -> bool:
        """A plain value, or a container of nothing that lies."""
        return type(value) in self.plain or (type(value) in self.containers and self._problem(value) is None)

    def _versus_plain(self, value: object, resisting: str) -> str | None:
        """What the value's own class does when compared with a plain value (None: nothing, or plain itself)."""
        if type(value) in self.plain or type(value) in self.containers:
            return None
        try:
            return self._class_verdict(type(value))[1]
        except Exception:
            return resisting

    def compare(self, left: object, op: str, right: object) -> Any:
        """``left <op> right`` (``op``: an ``ast`` comparison's name in ``_OPERATORS``), unless either side lies."""
        for value, other in ((left, right), (right, left)):
            self.inspect_value(value)
            versus_plain = self._versus_plain(value, "an object that resists inspection")
            if versus_plain and self._plain(other):
                self._fail(f"{versus_plain} (class {type(value).__qualname__}), compared with a plain value")
        if op == "In":
            return _OPERATORS[op](right, left)
        if op == "NotIn":
            return not _OPERATORS[op](right, left)
        return _OPERATORS[op](left, right)

    def truth(self, value: object) -> bool:
        """``bool(value)`` for an ``assert``, unless the value lies or its class decides its own truth."""
        self.inspect_value(value)
        versus_plain = self._versus_plain(value, "an object that resists inspection, __bool__")
        if versus_plain and ("__bool__" in versus_plain or "__len__" in versus_plain):
            self._fail(f"{versus_plain} (class {type(value).__qualname__}), asserted as true")
        return bool(value)
