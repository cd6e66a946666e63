"""The guard's state in the kernel, set by ``install``, and the helpers a rewritten test cell calls.

Contract: ``_State(shell, modules)`` records what the tests rely on (the watch list of
``grading.guard.watchlist``, resolved; the guard's own modules, functions and classes, all
the way down; the ``sys.modules`` entries of both; IPython's tables of hooks), registers the
test-cell transformer with IPython, and holds ``helpers``, the tuple a test cell receives (its
positions: ``grading.guard.protocol``). Its attributes do not change after ``__init__``
except ``armed`` and ``test_codes``, which only the audit hook sets (it compares every other
slot with its own copy). The helpers decide what may run code the guard does not trust
(``call``, ``mark``, ``key``), tell the audit hook, and compare everything again when it may
have run (``after``); the checks on objects that lie are ``grading.guard.lying``'s.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from grading.guard.cell import _CellHook
from grading.guard.lying import _Lying
from grading.guard.protocol import EVENT, MODULES, TEST_FUNCTION, GradingIntegrityError, _message
from grading.guard.records import _ADDED, _ITEM, _MISSING, _NO_CODES, _OPTIONAL, _cell_contents, _hook_lists, _Recorder
from grading.guard.trust import _HEAP_TYPE, _course_roots, _genuine, _installed_file, _trusted_roots
from grading.guard.vault import _core
from grading.guard.watchlist import COMPARES, CONTAINERS, HARMLESS, OVERRIDES, PROTOCOL, Watch

T = TypeVar("T")

_PARTIAL = functools.partial
_ELEMENT_FREE = frozenset(  # methods of C containers that never run code of the elements already in them
    [(list, name) for name in ("append", "insert", "pop", "copy", "clear", "reverse", "extend", "__len__")]
    + [(dict, name) for name in ("keys", "values", "items", "copy", "clear", "__len__")]
    + [(set, name) for name in ("copy", "clear", "__len__")]
)
_C_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
)


class _State(_Lying):
    """What ``install`` recorded; the helpers a test cell calls are its bound methods."""

    __slots__ = (
        "armed", "compares", "containers", "core", "data", "denied", "functions", "genuine", "genuine_classes",
        "harmless", "helpers", "installed_files", "kept", "labels", "overrides", "pending", "plain", "protocol",
        "records", "roots", "shell", "tensor_api", "tensor_types", "test_codes", "trace", "transformer", "user_ns",
        "value_bases", "verdicts",
    )  # fmt: skip
    # the slots that change: the hidden lines of the test cell about to run, and the code objects of the test
    # running (set by the audit hook alone, which compares them with its own copy at every verification)
    _MUTABLE = ("armed", "test_codes")

    def __init__(self, shell: Any, modules: list[str]) -> None:
        self.shell = shell
        self.user_ns: dict[str, Any] = shell.user_ns
        self.armed: tuple[int, ...] | None = None
        self.test_codes: frozenset[int] = _NO_CODES
        self.pending: types.MappingProxyType[str, bool] = types.MappingProxyType({"verify": False})  # the hook's own
        watch = Watch(shell, modules)
        self.containers = CONTAINERS
        self.protocol = PROTOCOL
        self.overrides = OVERRIDES
        self.compares = COMPARES
        self.harmless = HARMLESS
        self.tensor_types = watch.tensor_types
        self.plain = watch.plain
        self.value_bases = watch.value_bases
        self.data = watch.data
        self.denied = watch.denied
        self.genuine, self.genuine_classes, self.kept = _genuine()
        self.tensor_api = watch.tensor_api
        self.roots = _trusted_roots()  # now that course_utils is imported: its folder is trusted too
        files = {k.co_filename for k in self.kept if type(k) is types.CodeType}
        files |= {f for m in list(sys.modules.values()) if isinstance(f := getattr(m, "__file__", None), str)}
        known: dict[str, bool] = {}  # installed files, known before any code of the notebook's ran: no realpath
        self.installed_files = frozenset(f for f in files if _installed_file(f, self.roots, known))

        self.transformer = _CellHook(self)
        shell.ast_transformers.append(self.transformer)
        self.helpers = (
            self.inspect_value, self.compare, self.truth, self.returned, self.export, locals, self.initial,
            self.run, self.pin, self.display, self.call, self.mark, self.key, self.after,
        )  # fmt: skip
        recorder = _Recorder(self.roots, _course_roots())
        self._record(recorder, watch)
        for owner, attr, label in _hook_lists(shell):
            target = owner.get(attr, ()) if isinstance(owner, dict) else getattr(owner, attr)
            baseline = tuple(target.items()) if isinstance(target, dict) else tuple(target)
            recorder.add(_ADDED, owner, attr, baseline, label)
        self.records = tuple(recorder.records)
        self.functions = tuple(recorder.functions)
        self.verdicts = frozenset(id(function) for function in self.functions)
        self.labels = dict(recorder.labels)
        self.core = _core(self)
        self.trace = (sys.gettrace(), sys.getprofile())

    def _record(self, recorder: _Recorder, watch: Watch) -> None:
        """The watch list, the guard's own modules, functions and classes, and the names the notebook may bind."""
        for key, (owner, attr) in watch.watched.items():
            if key in watch.lazy:  # a package's lazy export: absent until first used, then the function itself
                recorder.add(_OPTIONAL, vars(owner), attr, watch.lazy[key], key)
                continue
            found = recorder.attribute(owner, attr, key)
            recorder.value(found, key, 1, set())
        own = [
            (name, value)
            for module in MODULES
            for name, value in vars(sys.modules[module]).items()
            if isinstance(value, types.FunctionType | type) and getattr(value, "__module__", None) == module
        ]
        for name, made in sorted(own, key=lambda item: item[0]):  # by name, as when the guard was one module
            recorder.value(made, f"the grader's {name}", 0, set(vars(made)) if isinstance(made, type) else set())
        for key, (owner, attr) in watch.watched.items():  # the check functions' own make-up, all the way down
            found = getattr(owner, attr, None)
            if isinstance(found, types.FunctionType):
                recorder.function(found, key, 0)
        for name in dict.fromkeys([*watch.module_names, *MODULES]):
            recorder.add(_ITEM, sys.modules, name, sys.modules.get(name, _MISSING), f"sys.modules[{name!r}]")
        for name, value in watch.namespace.items():
            recorder.add(_OPTIONAL, self.user_ns, name, value, f"the name {name!r}")

    # -- helpers the rewritten test cell calls ------------------------------------------

    def verify(self, _audit: Callable[..., None] = sys.audit) -> None:
        """Fail unless everything the tests rely on is as recorded (the audit hook compares it)."""
        box: list[Any] = []
        _audit(EVENT + "verify", box)
        if not box:
            raise GradingIntegrityError("the grader's checks are missing: the tests cannot be trusted")
        if box[0]:
            raise GradingIntegrityError(_message(box[0], during=True))

    def returned(self, value: T) -> T:
        """After a call the test made in its own frame (``eval``, ``super()``, ...): everything compared, always."""
        self.verify()
        return self.inspect_value(value)

    def call(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> functools.partial[Any]:
        """A call of the test's, made by the test's own frame: ``after(call(f, *args)())``.

        Returns the call ready to make (``functools.partial``: C code, so no frame of the guard's
        stands between the test and the function, for warnings and tracebacks). When code the guard
        does not trust may run in it, the audit hook is told first, and ``after`` compares
        everything before the result is used. Trusted: a function the test itself defined (its
        body is guarded too), and code that was in the kernel before the notebook's first cell
        (installed libraries' Python functions and classes, C functions) given only plain data.
        Anything else, the check functions recorded by ``install`` included (they decide grades),
        is followed by a comparison.
        """
        if self._unsettled_call(function, args, kwargs):
            self._pending()
        return _PARTIAL(function, *args, **kwargs)

    def mark(self, owner: T) -> T:
        """``after(mark(owner).name)``, ``after(mark(owner)[key])``: tells the hook when reading from ``owner``
        may run code the guard does not trust (its class is not installed code)."""
        if not self._settled(owner):
            self._pending()
        return owner

    def key(self, key: T) -> T:
        """An item's key: tells the hook when it is not plain data (its hash and equality may run code)."""
        if not self._data((key,), ()):
            self._pending()
        return key

    def after(self, value: T) -> T:
        """After a call, attribute or item: everything compared when code not trusted may have run since."""
        if self.pending["verify"]:
            self.verify()
        return self.inspect_value(value)

    def _pending(self, _audit: Callable[..., None] = sys.audit) -> None:
        """Tell the audit hook that code the guard does not trust may run: ``after`` compares everything."""
        _audit(EVENT + "pending")  # only the hook can set or clear the flag (``pending`` is a read-only view)

    def initial(self, name: str) -> Any:
        """The value a name the test assigns had before the test (module semantics; KeyError when none)."""
        return self.user_ns[name]

    def export(self, names: dict[str, Any], own: tuple[str, ...] = ()) -> None:
        """The test's variables into the notebook's namespace once it has ended, as nbgrader leaves them.

        A variable of the test's that the test deleted (``del``, the end of an ``except ... as``)
        is gone from the namespace too, as at module level.
        """
        space = self.user_ns
        space.update({k: v for k, v in names.items() if not k.startswith("__course")})
        for name in own:
            if name not in names:
                space.pop(name, None)

    def run(self, function: Callable[..., Any], show: bool, _audit: Callable[..., None] = sys.audit) -> None:
        """Run the test's function (out of the namespace first) and display its value as IPython would."""
        self.user_ns.pop(TEST_FUNCTION, None)
        _audit(EVENT + "run", function.__code__)  # the hook trusts the functions of this code, and only them
        return self.display(function(self.helpers), show)

    # -- what may run code the guard does not trust ---------------------------------------

    def _settled_class(self, cls: type) -> bool:
        """A class of C code (not a heap type) or one that existed before the notebook's first cell."""
        return not cls.__flags__ & _HEAP_TYPE or id(cls) in self.genuine_classes

    def _settled(self, owner: object) -> bool:
        """Whether reading an attribute or item of ``owner`` runs only C code or code installed before the notebook."""
        cls = type(owner)
        if not self._settled_class(cls):
            return False
        if cls is types.ModuleType:
            hook = vars(owner).get("__getattr__")  # a module's own attribute hook (PEP 562)
            return hook is None or self._genuine_function(hook)
        return not isinstance(owner, type) or self._settled_class(owner)

    def _genuine_function(self, function: Any) -> bool:
        """A Python function whose code and globals existed before the notebook's first cell, closing over data."""
        if (id(function.__code__), id(function.__globals__)) not in self.genuine:
            return False
        cells = tuple(_cell_contents(cell) for cell in function.__closure__ or ())
        keywords = function.__kwdefaults__
        return self._data((*(function.__defaults__ or ()), *cells), keywords.values() if keywords else ())

    def _settled_instance(self, owner: object) -> bool:
        """A class of installed code, or an instance of one (no ``__slots__``) whose own attributes are all data."""
        cls = type(owner)
        if isinstance(owner, type):
            return self._settled_class(owner) and self._settled_class(cls)
        if not self._settled_class(cls) or any("__slots__" in vars(klass) for klass in cls.__mro__):
            return False
        attributes = getattr(owner, "__dict__", None)
        return type(attributes) is dict and self._data(attributes.values(), (), budget=200)

    def _test_function(self, function: types.FunctionType) -> bool:
        """A function the running test defined (its body is rewritten like the test's)."""
        return id(function.__code__) in self.test_codes and function.__globals__ is self.user_ns

    def _unsettled_call(self, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether calling ``function`` may run code the guard does not trust (or decides a grade)."""
        kind = type(function)
        if kind is types.MethodType:
            owner, function = function.__self__, function.__func__
            if not (self._data((owner,), ()) or self._settled_instance(owner)):
                return True
            kind = type(function)
        if kind is types.FunctionType:
            if id(function) in self.verdicts:
                return True  # a check function: it decides grades, so everything is compared once it ran
            if self._test_function(function):
                return False
            return not (self._genuine_function(function) and self._data(args, kwargs.values()))
        if kind in _C_CALLABLES:
            owner = getattr(function, "__self__", None)
            if id(function) in self.denied or not self._settled_owner(function, owner, kind):
                return True
            return not self._data(args, kwargs.values())
        if isinstance(function, type):
            settled = self._settled_class(function) and self._settled_class(kind)
            return not (settled and self._data(args, kwargs.values()))
        return True

    def _settled_owner(self, function: Any, owner: object, kind: type) -> bool:
        """Whether the object a C function is bound to runs no code of the submission's when it is used."""
        if owner is None or (kind is types.BuiltinFunctionType and isinstance(owner, types.ModuleType)):
            return True
        if (type(owner), function.__name__) in _ELEMENT_FREE:
            return True  # list.append and the like never look at the elements already there
        return self._data((owner,), ()) or (isinstance(owner, type) and self._settled_class(owner))

    def _data(self, values: Iterable[Any], more: Iterable[Any], budget: int = 2_000) -> bool:
        """Whether every value is plain data (numbers, strings, tensors, arrays, containers of them), a class of
        installed code or a function the test defined: nothing that runs code of the submission's when used."""
        data = self.data
        pending = [*values, *more]
        while pending:
            budget -= 1
            if budget < 0:
                return False
            value = pending.pop()
            kind = type(value)
            if kind in data:
                continue
            if kind is list or kind is tuple or kind is set or kind is frozenset:
                pending += value
            elif kind is dict:
                pending += value.keys()
                pending += value.values()
            elif kind.__name__ == "ndarray" and kind.__module__ == "numpy":
                if value.dtype.hasobject:
                    return False
            elif isinstance(value, type):
                if not (self._settled_class(value) and self._settled_class(kind)):
                    return False
            elif kind is not types.FunctionType or not self._test_function(value):
                return False
        return True

    def pin(self, names: tuple[str, ...], _audit: Callable[..., None] = sys.audit) -> None:
        """The code, modules and classes the test reads from the namespace: nothing may rebind them while it runs."""
        _audit(EVENT + "pin", tuple(names))

    def display(self, value: object, show: bool) -> None:
        """Show a test's last value (nbgrader's partial credit) without ``Out``, ``_`` or the previous cell's ``;``."""
        hook = self.shell.displayhook
        if not show or value is None:
            return None
        hook.start_displayhook()
        hook.write_output_prompt()
        formatted, metadata = hook.compute_format_data(value)
        hook.fill_exec_result(value)
        if formatted:
            hook.write_format_data(formatted, metadata)
        hook.finish_displayhook()
        return None
