"""The grader's own code inside the grading kernel: what the tests rely on is checked before,
during and after every test cell, the test runs in a scope the code under test cannot reach,
and objects that lie earn no points.

Contract, grader side: ``preamble(sources)`` is the source of the first cell the grader runs,
before any learner code; ``guard(index, hidden)`` the source of the cell it runs right before
each test cell (``hidden``: the test cell's hidden-test line numbers) and ``closing(index)``
the source of the cell it runs right after. Each of these two answers with
``digest(token, index, phase)``, an HMAC of a secret the worker hands the kernel in
``TOKEN_FILE``; the executor fails the test, and every later one, when the answer is
missing or wrong. Test cells themselves are sent with ``store_history=False``.

Kernel side (this module only imports the standard library until ``install`` is told which
modules the notebook uses):

* ``install`` records what the tests rely on and what it is made of: the comparison
  functions of torch, numpy and math, the ``course_utils.checks`` helpers, a few builtins,
  IPython's execution, display and error machinery, the trace function, torch's mode stacks,
  and, walked from each Python function among them, its code, defaults, keyword defaults,
  the variables it closes over, the global names and builtins its code uses, the attributes
  of the modules and classes it reaches, ``__wrapped__``, the virtual subclasses of the
  abstract classes it tests against, and this module's own functions, classes and state.
  Code a cell left to run before this one in a later kernel (IPython startup and
  configuration files, the user site-packages) is itself a finding.
  Then it installs an audit hook (``sys.addaudithook``) that keeps the secret (no attribute
  holds it) and decides every verdict: it refuses, and records, any change to the code,
  defaults or keyword defaults of a recorded function, a second audit hook, and opening
  ``/proc/*/mem``; ``gc``'s object-finding functions called by the notebook's code at any
  time; frame and trace access (``sys._getframe``, tracebacks' and generators' frames,
  ``settrace``) by the notebook's code while a test runs;
* ``check`` (the cell before a test) asks the hook: it compares everything recorded, checks
  IPython's transformers, callbacks, display hooks and formatters, the trace and profile
  functions, torch's modes, signal handlers and threads running the notebook's code, and
  only then answers and arms the next cell;
* the armed test cell is rewritten before it runs: its body becomes a function's, with module
  semantics where the test relies on the notebook: a name the cell declares ``global``, or
  first reads or deletes (``orig = squares; del squares``), is the notebook's (``global`` in
  that function), so ``del``, ``global`` and rebinding what the code under test calls keep
  their meaning; a name it binds first (its expected values, its helper functions) is a
  local that the code under test cannot read or rebind, copied to the namespace when the
  test ends, as nbgrader leaves it. The names it only reads are pinned; every value it uses
  (names, call results, attributes, items), every ``assert`` and single comparison passes
  through ``inspect_value``/``compare``/``truth``. A call goes through ``call`` and ``after``
  (``after(call(f, *args)())``: the test's own frame makes it, through ``functools.partial``),
  an attribute or item through ``mark``/``key`` and ``after``: when code the guard does not
  trust may run in it (not the test's own functions, nor code that existed before the
  notebook's first cell, recorded by identity at ``install``, given plain data; every check
  function), the audit hook is told first, and everything recorded is compared again before
  the result is used. The
  cell's source is scrubbed of its hidden lines in ``linecache``, in the kernel's request
  and in IPython's execution record, so that neither the code under test nor a later cell
  can read them; its value (nbgrader's partial credit) is displayed without touching
  ``Out``/``_``;
* ``close`` (the cell after a test) compares everything again (a change the test's own calls
  made fails that test too) and removes what the test left: the last traceback and its frames.

The checks on objects that lie are as before: ``GradingIntegrityError`` (the test scores 0,
the note says what was found) on an instance of a ``torch.Tensor`` subclass defined outside
installed code that redefines ``__torch_function__``, ``__torch_dispatch__`` or anything
``torch.Tensor`` has; a subclass of a plain value type so defined that redefines how it
compares or converts; any object whose class so defined implements torch's or numpy's
override protocols or redefines ``__class__``; and, in a comparison with a plain value on
the other side, an object whose class so defined has its own comparison.

All of this runs in the learner's interpreter: it is a tripwire and a filter, not a proof.
The README's threat model says what it stops, what only the grader outside the kernel
guarantees, and what escapes.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import types

__all__ = [
    "HELPERS",
    "ROLE_KEY",
    "TOKEN_FILE",
    "GradingIntegrityError",
    "check",
    "close",
    "closing",
    "digest",
    "guard",
    "install",
    "preamble",
    "watched_modules",
]

ROLE_KEY = "course_grading"
HELPERS = "__course_grading__"  # the name the grader's check cell hands the next test its helpers through
LOCAL = "__course_g__"  # the test function's own reference to them (a local: nothing can rebind it)
TEST_FUNCTION = "__course_test__"
RESULT = "__course_result__"
TOKEN_FILE = ".course-grading-token"  # in the kernel's working directory until ``install`` reads it
EVENT = "course_grading."  # the audit events of the grader's protocol

# positions of the helpers in the tuple a test cell receives (a tuple: nothing can replace an item)
VALUE, COMPARE, TRUTH, RETURNED, EXPORT, LOCALS, INITIAL, RUN, PIN, DISPLAY, CALL, MARK, KEY, AFTER = range(14)

_MAX_ITEMS = 10_000  # elements of one container inspected
_MAX_DEPTH = 6
_LIBRARY_DEPTH = 2  # how far the record follows installed libraries' functions (course code: all the way)
_MAX_RECORDS = 12_000


def watched_modules(sources: list[str]) -> list[str]:
    """Which heavy modules the notebook's cells use (importing torch costs seconds: only when needed)."""
    text = "\n".join(sources)
    wanted = []
    if "torch" in text or "course_utils" in text:
        wanted += ["torch", "numpy"]
    elif "numpy" in text or "np." in text:
        wanted.append("numpy")
    if "course_utils" in text:
        wanted.append("course_utils")
    return wanted


def guard(index: int, hidden: tuple[int, ...] | list[int] = ()) -> str:
    """The source of the check cell at position ``index`` (the next cell's hidden lines: ``hidden``)."""
    lines = tuple(sorted({int(i) for i in hidden}))
    return f'__import__("grading.guard", fromlist=["check"]).check({int(index)}, {lines!r})'


def closing(index: int) -> str:
    """The source of the cell at position ``index`` that closes the test before it."""
    return f'__import__("grading.guard", fromlist=["close"]).close({int(index)})'


def digest(token: str | None, index: int, phase: str = "check") -> str:
    """What the grader's cell at ``index`` answers in ``phase`` (``check`` or ``close``) for ``token``."""
    import hashlib
    import hmac

    return hmac.new((token or "").encode(), f"{phase}:{int(index)}".encode(), hashlib.sha256).hexdigest()[:32]


def preamble(sources: list[str]) -> str:
    """The source of the grader's first cell for a notebook whose cells are ``sources``.

    The guard, and the modules it records (torch, numpy, ``course_utils``), are imported
    with the kernel's working directory taken off ``sys.path`` for the duration: that folder
    holds the submission's own files, and a ``grading/``, ``course_utils/`` or ``torch.py``
    among them would otherwise be imported in place of the real ones. Later imports of the
    same names find these modules already loaded.
    """
    modules = watched_modules(sources)
    return (
        "import os as _os, sys as _sys\n"
        "_path = _sys.path[:]\n"
        "_sys.path[:] = [p for p in _path if _os.path.abspath(p or '.') != _os.getcwd()]\n"
        "try:\n"
        f"    __import__('grading.guard', fromlist=['install']).install(get_ipython(), {modules!r})\n"
        "finally:\n"
        "    _sys.path[:] = _path\n"
        "    del _os, _sys, _path\n"
    )


class GradingIntegrityError(Exception):
    """Raised in the kernel when the tests can no longer be trusted."""


# ---------------------------------------------------------------------------------------
# which code counts as installed (trusted): the interpreter's and the environment's files


def _trusted_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(os.__file__)}
    roots.update(_course_roots())
    resolved = {form.rstrip(os.sep) + os.sep for r in roots if r for form in (r, os.path.realpath(r))}
    return tuple(sorted(r for r in resolved if r != os.sep))  # "/" as a prefix would trust everything


def _course_roots() -> tuple[str, ...]:
    """The folders of this course's own packages (``course_utils``, ``grading``): recorded all the way down."""
    roots = []
    for name in ("course_utils", "grading"):
        package = sys.modules.get(name)
        if package is not None and getattr(package, "__path__", None):
            roots += [os.path.realpath(p).rstrip(os.sep) + os.sep for p in package.__path__]
    return tuple(roots)


def _installed_file(filename: object, roots: tuple[str, ...], cache: dict | None = None) -> bool:
    if not isinstance(filename, str):
        return False
    if cache is not None and filename in cache:
        return cache[filename]
    found = os.path.realpath(filename).startswith(roots)
    if cache is not None:
        cache[filename] = found
    return found


def _code_files(value: object) -> list[object]:
    """The source files of the Python code behind ``value`` (a function, property, classmethod, ...)."""
    files = []
    for item in (value, getattr(value, "__func__", None), getattr(value, "fget", None), getattr(value, "func", None)):
        code = getattr(item, "__code__", None)
        if isinstance(code, types.CodeType):
            files.append(code.co_filename)
    return files


def _trusted(value: object, roots: tuple[str, ...], cache: dict | None = None) -> bool:
    """Whether a callable or object comes from installed code (torch, matplotlib, ...), not the submission."""
    files = _code_files(value)
    if files:
        return all(_installed_file(f, roots, cache) for f in files)
    if isinstance(value, types.BuiltinFunctionType | types.BuiltinMethodType | types.MethodWrapperType):
        return True  # C code of the interpreter or an extension: nothing a submission wrote
    cls = value if isinstance(value, type) else type(value)
    module_name = getattr(cls, "__module__", "") or ""
    if module_name in sys.builtin_module_names:
        return True  # the interpreter's own classes (int, float, ...)
    module = sys.modules.get(module_name)
    if module_name == "__main__" or not _installed_file(getattr(module, "__file__", None), roots, cache):
        return False
    return all(_installed_file(f, roots, cache) for klass in cls.__mro__ for v in vars(klass).values()
               for f in _code_files(v))  # fmt: skip


# ---------------------------------------------------------------------------------------
# records: what the tests rely on, and what it is made of


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()

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


def _contents(value: object) -> tuple:
    if isinstance(value, dict):
        return tuple(value.items())
    return tuple(value)  # type: ignore[arg-type]


def _same_contents(value: object, expected: tuple) -> bool:
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
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


def _hook_lists(shell) -> list[tuple[object, str, str]]:
    """(owner, attribute, label) of IPython's lists and tables of code it runs around cells and outputs."""
    found = []
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


_PROCESS_STATE = {  # attributes of sys that IPython and ipykernel rebind as they run cells
    "excepthook", "displayhook", "breakpointhook", "unraisablehook", "stdout", "stderr", "stdin", "ps1", "ps2",
    "ps3", "last_type", "last_value", "last_traceback", "last_exc", "tracebacklimit",
}  # fmt: skip


class _Recorder:
    """Builds the records of what a set of objects is made of, following the names their code uses."""

    def __init__(self, roots: tuple[str, ...], course: tuple[str, ...]):
        self.roots = roots
        self.course = course
        self.records: list[tuple] = []
        self.functions: list[types.FunctionType] = []  # the functions whose code and defaults are protected
        self.labels: dict[int, str] = {}
        self._keys: set[tuple[int, object]] = set()
        self._seen: set[object] = set()
        self._keep: list[object] = []  # keeps every recorded object alive, so that no id is reused

    def add(self, kind: int, target: object, key: object, expected: object, label: str) -> None:
        marker = (id(target), key if kind in (_ITEM, _ATTR, _OPTIONAL, _ADDED) else kind)
        if marker in self._keys or len(self.records) >= _MAX_RECORDS:
            return
        self._keys.add(marker)
        self._keep.append(target)
        self.records.append((kind, target, key, expected, label))

    def in_course(self, code: types.CodeType) -> bool:
        return _installed_file(code.co_filename, self.course)

    # -- attributes -----------------------------------------------------------------------

    def attribute(self, owner: object, name: str, label: str) -> object:
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
        elif type(value).__name__ == "partial" and callable(getattr(value, "func", None)):
            self.value(value.func, label, depth, names)

    def module(self, module: types.ModuleType, label: str, depth: int, names: set[str]) -> None:
        space = vars(module)
        for name in sorted(names & space.keys() - (_PROCESS_STATE if module is sys else set())):
            found = space[name]
            if not (callable(found) or isinstance(found, types.ModuleType)):
                continue  # a library's data may change as it works; its code may not
            self.add(_ITEM, space, name, found, f"{module.__name__}.{name}")
            if (id(module), name) not in self._seen:
                self._seen.add((id(module), name))
                self.value(found, f"{module.__name__}.{name}", depth, names)

    def klass(self, cls: type, label: str, depth: int, names: set[str]) -> None:
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


# ---------------------------------------------------------------------------------------
# kernel-side state, set by install()


class _State:
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

    def __init__(self, shell, modules: list[str]):
        import builtins
        import math

        self.shell = shell
        self.user_ns = shell.user_ns
        self.armed = None
        self.test_codes = _NO_CODES
        self.pending: types.MappingProxyType = types.MappingProxyType({"verify": False})  # the hook's own, at install
        plain: set[type] = {
            int, float, complex, bool, str, bytes, bytearray, type(None), type(NotImplemented), type(Ellipsis),
            range, slice, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
            types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
            types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
            types.GeneratorType, types.CodeType, types.SimpleNamespace, property, classmethod, staticmethod,
        }  # fmt: skip
        self.containers = (list, tuple, dict, set, frozenset)
        value_bases: list[type] = [int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset]
        self.protocol = frozenset({
            "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__", "__contains__",
            "__hash__", "__int__", "__float__", "__complex__", "__index__", "__abs__", "__round__", "__trunc__",
            "__floor__", "__ceil__", "__neg__", "__pos__", "__sub__", "__rsub__", "__add__", "__radd__",
            "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__iter__", "__getitem__", "__array__",
            "__array_function__", "__array_ufunc__", "__array_interface__", "__array_priority__",
            "__torch_function__", "__torch_dispatch__", "__getattr__", "__getattribute__", "__instancecheck__",
            "__class__",
        })  # fmt: skip
        self.overrides = frozenset(
            {"__torch_function__", "__torch_dispatch__", "__array_function__", "__array_ufunc__"}
        )
        self.compares = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__"})
        tensor_api: frozenset[str] = frozenset()
        self.tensor_types: tuple[type, ...] = ()
        self.harmless = frozenset({
            "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__init__", "__new__", "__repr__",
            "__str__", "__format__", "__slots__", "__annotations__", "__init_subclass__", "__class_getitem__",
            "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__", "__reduce__",
            "__reduce_ex__", "__deepcopy__", "__copy__", "__dir__", "__sizeof__", "__setstate__", "__getstate__",
        })  # fmt: skip

        watched: dict[str, tuple[object, str]] = {}
        for name in ("isinstance", "issubclass", "type", "len", "abs", "float", "int", "bool", "round", "repr",
                     "AssertionError", "__import__", "__build_class__", "compile", "locals", "getattr"):  # fmt: skip
            watched[f"builtins.{name}"] = (builtins, name)
        watched["math.isclose"] = (math, "isclose")
        for name in ("showtraceback", "_showtraceback", "run_cell", "run_cell_async", "run_code", "run_ast_nodes",
                     "transform_ast", "transform_cell", "_run_cell", "compile", "displayhook", "display_pub",
                     "display_formatter", "InteractiveTB", "custom_exceptions"):  # fmt: skip
            if hasattr(shell, name):
                watched[f"IPython shell.{name}"] = (shell, name)
        kernel = getattr(shell, "kernel", None)
        if kernel is not None:
            for name in ("do_execute", "send_response", "session", "get_parent"):
                if hasattr(kernel, name):
                    watched[f"ipykernel {name}"] = (kernel, name)
            session = getattr(kernel, "session", None)
            if session is not None:
                watched["ipykernel session.send"] = (session, "send")
        for owner, name in ((ast.NodeTransformer, "generic_visit"), (ast.NodeVisitor, "visit"), (ast, "parse"),
                            (ast, "fix_missing_locations"), (ast, "copy_location"), (ast, "unparse")):  # fmt: skip
            watched[f"ast.{getattr(owner, '__name__', 'ast')}.{name}"] = (owner, name)
        watched["linecache.cache"] = (sys.modules["linecache"], "cache")
        for name in ("compute_format_data", "start_displayhook", "write_format_data", "finish_displayhook"):
            if hasattr(getattr(shell, "displayhook", None), name):
                watched[f"IPython displayhook.{name}"] = (shell.displayhook, name)
        module_names = ["builtins", "math", "sys", "os", "ast", "linecache", "types"]
        namespace: dict[str, object] = {"math": math}
        lazy: dict[str, object] = {}

        if "numpy" in modules or "torch" in modules:
            import numpy
            import numpy.testing

            plain.add(numpy.ndarray)
            plain.update(t for t in vars(numpy).values() if isinstance(t, type) and issubclass(t, numpy.generic))
            plain.update({numpy.dtype, type(numpy.dtype("float32"))})
            value_bases += [numpy.ndarray, numpy.generic]
            for name in ("allclose", "isclose", "array_equal", "array_equiv", "equal"):
                watched[f"numpy.{name}"] = (numpy, name)
            for name in ("assert_allclose", "assert_array_equal", "assert_equal", "assert_almost_equal",
                         "assert_array_almost_equal"):  # fmt: skip
                watched[f"numpy.testing.{name}"] = (numpy.testing, name)
            module_names += ["numpy", "numpy.testing"]
            namespace.update(np=numpy, numpy=numpy)
        if "torch" in modules:
            import torch
            import torch.testing

            plain.update({torch.Tensor, torch.nn.Parameter, torch.Size, torch.dtype, torch.device})
            plain.update({torch.Generator, torch.finfo, torch.iinfo, torch.layout, torch.memory_format})
            value_bases.insert(0, torch.Tensor)
            self.tensor_types = (torch.Tensor,)
            tensor_api = frozenset(dir(torch.Tensor)) - self.harmless
            for name in ("allclose", "equal", "isclose", "eq", "ne", "all", "any"):
                watched[f"torch.{name}"] = (torch, name)
            watched["torch.testing.assert_close"] = (torch.testing, "assert_close")
            for name in ("__eq__", "__ne__", "__bool__", "__torch_function__", "allclose", "equal", "item",
                         "tolist", "eq", "all", "shape", "dtype", "detach", "cpu"):  # fmt: skip
                watched[f"torch.Tensor.{name}"] = (torch.Tensor, name)
            module_names += ["torch", "torch.testing"]
            namespace["torch"] = torch
        if "course_utils" in modules:
            import course_utils
            import course_utils.checks as checks

            for name in dir(checks):
                if name.startswith(("check_", "forbidden_calls", "_assert_close", "_isclose", "_strictly_equal",
                                    "_PLAIN", "_true_")):  # fmt: skip
                    watched[f"course_utils.checks.{name}"] = (checks, name)
                    if name in getattr(course_utils, "__all__", ()):
                        watched[f"course_utils.{name}"] = (course_utils, name)
                        lazy[f"course_utils.{name}"] = getattr(checks, name)
            module_names += ["course_utils", "course_utils.checks"]
            namespace.update({name: getattr(checks, name) for name in dir(checks) if name.startswith("check_")})
        self.plain = frozenset(plain)
        self.value_bases = tuple(value_bases)
        data: set[type] = {int, float, complex, bool, str, bytes, type(None), range, slice}
        if "numpy" in modules or "torch" in modules:
            data.update(t for t in plain if t.__module__ == "numpy" and t is not numpy.ndarray)
        if "torch" in modules:
            data.update({torch.Tensor, torch.nn.Parameter, torch.Size, torch.dtype, torch.device})
        self.data = frozenset(data)
        self.denied = frozenset(id(getattr(builtins, name)) for name in (
            "print", "input", "open", "exec", "eval", "compile", "__import__", "breakpoint", "help", "exit", "quit",
            "setattr", "delattr", "iter", "next",
        ) if hasattr(builtins, name))  # fmt: skip
        self.genuine, self.genuine_classes, self.kept = _genuine()
        self.installed_files: frozenset[str] = frozenset()
        self.tensor_api = tensor_api
        self.roots = _trusted_roots()  # now that course_utils is imported: its folder is trusted too
        files = {k.co_filename for k in self.kept if type(k) is types.CodeType}
        files |= {getattr(m, "__file__", None) for m in list(sys.modules.values())} - {None}
        known: dict = {}  # installed files, known before any code of the notebook's ran: no realpath per check
        self.installed_files = frozenset(f for f in files if _installed_file(f, self.roots, known))

        self.transformer = _CellHook(self)
        shell.ast_transformers.append(self.transformer)
        self.helpers = (
            self.inspect_value, self.compare, self.truth, self.returned, self.export, locals, self.initial,
            self.run, self.pin, self.display, self.call, self.mark, self.key, self.after,
        )  # fmt: skip

        recorder = _Recorder(self.roots, _course_roots())
        for key, (owner, attr) in watched.items():
            if key in lazy:  # a package's lazy export: absent until first used, then the function itself
                recorder.add(_OPTIONAL, vars(owner), attr, lazy[key], key)
                continue
            found = recorder.attribute(owner, attr, key)
            recorder.value(found, key, 1, set())
        here = sys.modules[__name__]
        for name, value in sorted(vars(here).items()):
            if isinstance(value, types.FunctionType | type) and getattr(value, "__module__", None) == __name__:
                recorder.value(value, f"the grader's {name}", 0, set(vars(value)) if isinstance(value, type) else set())
        for key, (owner, attr) in watched.items():  # the check functions' own make-up, all the way down
            found = getattr(owner, attr, None)
            if isinstance(found, types.FunctionType):
                recorder.function(found, key, 0)
        for name in dict.fromkeys([*module_names, __name__]):
            recorder.add(_ITEM, sys.modules, name, sys.modules.get(name, _MISSING), f"sys.modules[{name!r}]")
        for name, value in namespace.items():
            recorder.add(_OPTIONAL, self.user_ns, name, value, f"the name {name!r}")
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

    # -- helpers the rewritten test cell calls ------------------------------------------

    def verify(self, _audit=sys.audit) -> None:
        """Fail unless everything the tests rely on is as recorded (the audit hook compares it)."""
        box: list = []
        _audit(EVENT + "verify", box)
        if not box:
            raise GradingIntegrityError("the grader's checks are missing: the tests cannot be trusted")
        if box[0]:
            raise GradingIntegrityError(_message(box[0], during=True))

    def returned(self, value):
        """After a call the test made in its own frame (``eval``, ``super()``, ...): everything compared, always."""
        self.verify()
        return self.inspect_value(value)

    def call(self, function, /, *args, **kwargs):
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

    def mark(self, owner):
        """``after(mark(owner).name)``, ``after(mark(owner)[key])``: tells the hook when reading from ``owner``
        may run code the guard does not trust (its class is not installed code)."""
        if not self._settled(owner):
            self._pending()
        return owner

    def key(self, key):
        """An item's key: tells the hook when it is not plain data (its hash and equality may run code)."""
        if not self._data((key,), ()):
            self._pending()
        return key

    def after(self, value):
        """After a call, attribute or item: everything compared when code not trusted may have run since."""
        if self.pending["verify"]:
            self.verify()
        return self.inspect_value(value)

    def _pending(self, _audit=sys.audit) -> None:
        _audit(EVENT + "pending")  # only the hook can set or clear the flag (``pending`` is a read-only view)

    def initial(self, name: str):
        """The value a name the test assigns had before the test (module semantics; KeyError when none)."""
        return self.user_ns[name]

    def export(self, names: dict, own: tuple[str, ...] = ()) -> None:
        """The test's variables into the notebook's namespace once it has ended, as nbgrader leaves them.

        A variable of the test's that the test deleted (``del``, the end of an ``except ... as``)
        is gone from the namespace too, as at module level.
        """
        space = self.user_ns
        space.update({k: v for k, v in names.items() if not k.startswith("__course")})
        for name in own:
            if name not in names:
                space.pop(name, None)

    def run(self, function, show: bool, _audit=sys.audit):
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

    def _genuine_function(self, function: types.FunctionType) -> bool:
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

    def _unsettled_call(self, function, args: tuple, kwargs: dict) -> bool:
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

    def _settled_owner(self, function, owner: object, kind: type) -> bool:
        """Whether the object a C function is bound to runs no code of the submission's when it is used."""
        if owner is None or (kind is types.BuiltinFunctionType and isinstance(owner, types.ModuleType)):
            return True
        if (type(owner), function.__name__) in _ELEMENT_FREE:
            return True  # list.append and the like never look at the elements already there
        return self._data((owner,), ()) or (isinstance(owner, type) and self._settled_class(owner))

    def _data(self, values, more, budget: int = 2_000) -> bool:
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

    def pin(self, names: tuple[str, ...], _audit=sys.audit) -> None:
        """The code, modules and classes the test reads from the namespace: nothing may rebind them while it runs."""
        _audit(EVENT + "pin", tuple(names))

    def display(self, value, show: bool) -> None:
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

    # -- lying objects ------------------------------------------------------------------

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
                redefined = {n for n in redefined if any(not self._installed(f)
                                                         for f in _code_files(vars(klass)[n]))}  # fmt: skip
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

    def _problem(self, value: object, depth: int = 0) -> str | None:
        cls = type(value)
        if cls in self.plain:
            return None
        if cls in self.containers:
            if depth >= _MAX_DEPTH:
                return None
            items = value.items() if cls is dict else value  # type: ignore[union-attr]
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

    def _fail(self, problem: str) -> None:
        raise GradingIntegrityError(
            f"the test received {problem}: its comparisons cannot be trusted, so this test scores 0"
        )

    def inspect_value(self, value):
        if type(value) in self.plain:
            return value
        problem = self._problem(value)
        if problem:
            self._fail(problem)
        return value

    def _plain(self, value: object) -> bool:
        return type(value) in self.plain or (type(value) in self.containers and self._problem(value) is None)

    def _versus_plain(self, value: object, resisting: str) -> str | None:
        """What the value's own class does when compared with a plain value (None: nothing, or plain itself)."""
        if type(value) in self.plain or type(value) in self.containers:
            return None
        try:
            return self._class_verdict(type(value))[1]
        except Exception:
            return resisting

    def compare(self, left, op: str, right):
        for value, other in ((left, right), (right, left)):
            self.inspect_value(value)
            versus_plain = self._versus_plain(value, "an object that resists inspection")
            if versus_plain and self._plain(other):
                self._fail(f"{versus_plain} (class {type(value).__qualname__}), compared with a plain value")
        return _OPERATORS[op](left, right)

    def truth(self, value):
        self.inspect_value(value)
        versus_plain = self._versus_plain(value, "an object that resists inspection, __bool__")
        if versus_plain and ("__bool__" in versus_plain or "__len__" in versus_plain):
            self._fail(f"{versus_plain} (class {type(value).__qualname__}), asserted as true")
        return bool(value)


_OPERATORS = {
    "Eq": lambda a, b: a == b,
    "NotEq": lambda a, b: a != b,
    "Lt": lambda a, b: a < b,
    "LtE": lambda a, b: a <= b,
    "Gt": lambda a, b: a > b,
    "GtE": lambda a, b: a >= b,
    "In": lambda a, b: a in b,
    "NotIn": lambda a, b: a not in b,
}


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time (class statement, type()), not C's static one
_NO_CODES: frozenset = frozenset()
_PARTIAL = __import__("functools").partial
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


def _genuine() -> tuple[frozenset, frozenset, tuple]:
    """What code the kernel holds before the notebook's first cell: (code, globals) of every Python function
    (and the code nested in it), every class; and the objects themselves, kept alive so no id is reused."""
    import gc

    pairs: set[tuple[int, int]] = set()
    classes: set[int] = set()
    kept: list[object] = []
    for found in gc.get_objects():
        if type(found) is types.FunctionType:
            space, pending = found.__globals__, [found.__code__]
            while pending:
                code = pending.pop()
                if (id(code), id(space)) not in pairs:
                    pairs.add((id(code), id(space)))
                    kept += (code, space)
                    pending += [c for c in code.co_consts if type(c) is types.CodeType]
        elif issubclass(type(found), type):  # not isinstance: an object's __class__ may be a property
            classes.add(id(found))
            kept.append(found)
    return frozenset(pairs), frozenset(classes), tuple(kept)


def _core(state: _State) -> tuple:
    """The records the audit hook compares itself, before it trusts this module's functions to compare the rest."""
    import builtins

    here = vars(sys.modules[__name__])
    core: list[tuple] = [(_ITEM, here, name, value, f"the grader's {name}") for name, value in here.items()]
    for cls in (_State, _CellHook, _Rewriter, _Recorder, GradingIntegrityError):
        label = f"the grader's {cls.__name__}"
        core += [(_ITEM, vars(cls), name, value, f"{label}.{name}") for name, value in vars(cls).items()]
    for function in [f for f in state.functions if f.__module__ == __name__]:  # code and defaults: refused
        for name in sorted(_names(function.__code__) & vars(builtins).keys() - here.keys()):
            core.append((_ITEM, vars(builtins), name, vars(builtins)[name], f"builtins.{name}"))
    core.append((_ATTR, state.transformer, "state", state, "the grader's test-cell transformer"))
    return tuple(core)


def _message(problems: list[str], during: bool = False) -> str:
    when = " while the test ran" if during else ""
    return (
        f"the submission {'; '.join(dict.fromkeys(problems))}{when}: the tests cannot be trusted from here on, "
        "so this and every later test scores 0"
    )


# ---------------------------------------------------------------------------------------
# comparing the records again


def _changed(records, roots: tuple[str, ...], cache: dict) -> list[str]:
    """The labels of the records that no longer hold."""
    changed = []
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


def _grouped(records) -> tuple[tuple, tuple, tuple]:
    """The item records of real dictionaries and class namespaces, by the type of their dictionary, as
    (that type's ``get``, dictionaries, keys, expected values, labels); the other records; and the
    snapshots, as (container, keys, values, record) for a dict and (container, items, record) otherwise."""
    groups: dict[type, tuple[list, list, list, list]] = {}
    rest = []
    snaps = []
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


def _items_changed(groups: tuple) -> list[str]:
    """The labels of the item records that no longer hold: one pass of C code per kind of dictionary, identity
    only (an object's own ``__eq__`` is never asked)."""
    import itertools
    import operator

    changed = []
    for get, targets, keys, expected, labels in groups:
        if not all(map(operator.is_, map(get, targets, keys, itertools.repeat(_MISSING)), expected)):
            changed += [label for target, key, value, label in zip(targets, keys, expected, labels, strict=True)
                        if get(target, key, _MISSING) is not value]  # fmt: skip
    return changed


def _snaps_changed(snaps: tuple) -> list[str]:
    """The labels of the snapshots that no longer hold: the same objects in the same order, compared by identity
    in C first; only a container that fails that is compared as ``_changed`` does (keys by equality)."""
    import operator

    changed = []
    for target, *columns, record in snaps:
        same = len(target) == len(columns[0]) and all(map(operator.is_, target, columns[0]))
        if same and len(columns) == 2:
            same = all(map(operator.is_, target.values(), columns[1]))
        if not same and not _same_contents(target, record[3]):
            changed.append(record[4])
    return changed


def _untrusted_additions(owner, key, baseline: tuple, roots, cache) -> bool:
    """Whether a list or table of hooks gained code of the submission's (a library's own is fine)."""
    now = owner.get(key, ()) if isinstance(owner, dict) else getattr(owner, key, ())
    if isinstance(now, dict):
        before = dict(baseline)
        return any(not _trusted(v, roots, cache) for k, v in now.items() if before.get(k, _MISSING) is not v)
    return any(not _trusted(item, roots, cache) for item in now if not any(item is old for old in baseline))


def _registered_untrusted(cls: type, before: frozenset[int], roots, cache) -> bool:
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


def _defined_in_installed_code(cls: type, roots, cache) -> bool:
    name = getattr(cls, "__module__", "") or ""
    if name in sys.builtin_module_names:
        return True
    return name != "__main__" and _installed_file(getattr(sys.modules.get(name), "__file__", None), roots, cache)


def _modes() -> list[object]:
    """torch's active function and dispatch modes (``torch.set_default_device`` leaves one, say)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    modes = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
    return modes + [torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())]


def _problems(state: _State, roots, cache) -> list[str]:
    """What else the tests rely on: hooks that are not a table of IPython's, modes, threads, signals."""
    import signal
    import threading

    problems = []
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
        while ident != me and frame is not None:
            if not _installed_file(frame.f_code.co_filename, roots, cache):
                problems.append("left a thread running its own code (it could change what the tests rely on "
                                "while they run)")  # fmt: skip
                break
            frame = frame.f_back
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (ValueError, OSError):
            continue
        if callable(handler) and not _trusted(handler, roots, cache):
            problems.append("set a signal handler of its own (code that can run at any moment)")
            break
    return list(dict.fromkeys(problems))


# ---------------------------------------------------------------------------------------
# the audit hook: the secret, the verdicts, and what is refused


_FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile"})
_GC_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code", "ag_code"})
_FUNCTION_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_WATCHED_EVENTS = _FRAME_EVENTS | _GC_EVENTS | {"object.__setattr__", "object.__getattr__", "sys.addaudithook", "open"}


def _vault(state: _State, token: str | None, planted: list[str]):
    """The audit hook that holds the secret and decides; nothing outside its closure refers to what it keeps."""
    import _thread
    import hmac
    import inspect
    import traceback

    try:
        from _hashlib import hmac_digest as mac
    except ImportError:  # Python without OpenSSL
        mac = hmac.digest
    import builtins

    key = (token or "").encode()
    # every name the closures below use is bound here: a global of this module could be shadowed
    get_ident, getframe, length, get = _thread.get_ident, sys._getframe, len, getattr
    isinstance, hasattr, delattr, id, str, bytes, int, tuple, vars = (
        builtins.isinstance, builtins.hasattr, builtins.delattr, builtins.id, builtins.str, builtins.bytes,
        builtins.int, builtins.tuple, builtins.vars,
    )  # fmt: skip
    RuntimeError, missing, item, traceback_type, module_type, function_type, builtin_type = (
        builtins.RuntimeError, _MISSING, _ITEM, types.TracebackType, types.ModuleType, types.FunctionType,
        types.BuiltinFunctionType,
    )  # fmt: skip
    changed, problems_of, modules, guard_source, closing_source = _changed, _problems, sys.modules, guard, closing
    scrub_record = _scrub_execution_record
    here = vars(sys.modules[__name__])
    size = length(here)
    core, records = state.core, state.records
    full_items, full_rest, full_snaps = _grouped(records)
    light_items, light_rest, light_snaps = _grouped(tuple(r for r in records if r[0] != _ADDED))  # not IPython's
    items_changed, snaps_changed, no_codes, code_type = _items_changed, _snaps_changed, _NO_CODES, types.CodeType
    flags = {"verify": False}  # read by the helpers through ``state.pending``, written here alone
    state.pending = types.MappingProxyType(flags)
    slots = tuple((name, get(state, name)) for name in _State.__slots__ if name not in _State._MUTABLE)
    protected = {id(f): state.labels.get(id(f), f.__qualname__) for f in state.functions}
    helpers = state.helpers
    roots, cache = state.roots, {}
    frame_helpers = frozenset(
        form for module in (inspect, traceback) for form in (module.__file__, os.path.realpath(module.__file__))
    )
    watched_events, prefix, gc_events, frame_events = _WATCHED_EVENTS, EVENT, _GC_EVENTS, _FRAME_EVENTS
    frame_attributes, function_attributes = _FRAME_ATTRIBUTES, _FUNCTION_ATTRIBUTES
    refused: list[str] = list(planted)  # what the hook refused, reported by every verdict from then on
    phase = ["idle"]  # idle -> armed (after check) -> test (the test cell compiled) -> idle (after close)
    test = {"file": None, "pins": [], "hidden": (), "codes": None}
    owner = [None]  # the thread inside the hook: its own nested events are ignored

    def answer(kind: str, index: int) -> str:
        return mac(key, f"{kind}:{int(index)}".encode(), "sha256").hex()[:32]

    def core_changed() -> list[str]:
        if length(here) != size:
            return ["the grader's own module (a name added)"]
        for kind, target, name, expected, label in core:
            now = target.get(name, missing) if kind == item else get(target, name, missing)
            if now is not expected:
                return [label]
        for name, value in slots:
            if get(state, name, missing) is not value:
                return [f"the grader's state ({name})"]
        if get(state, "test_codes", missing) is not (test["codes"] or no_codes):
            return ["the grader's state (test_codes)"]
        return []

    def verify(full: bool) -> list[str]:
        labels = core_changed()
        if labels:  # this module's own functions cannot be trusted to compare the rest
            return [f"changed {', '.join(labels)}", *refused]
        labels = items_changed(full_items if full else light_items) + snaps_changed(full_snaps if full else light_snaps)
        labels += changed((full_rest if full else light_rest), roots, cache) + changed(test["pins"], roots, cache)
        labels = list(dict.fromkeys(labels))
        problems = [f"changed {', '.join(labels)}"] if labels else []
        if full:
            problems += problems_of(state, roots, cache)
        return problems + refused

    def caller_untrusted() -> bool:
        frame = getframe(2)  # 0: this function, 1: the hook, 2: the code that raised the event
        while frame is not None and frame.f_code.co_filename in frame_helpers:
            frame = frame.f_back  # inspect.stack(), traceback.walk_stack(): judge who asked for the frames
        if frame is None:
            return False
        filename = frame.f_code.co_filename
        return filename != test["file"] and not (isinstance(filename, str) and filename.startswith(roots))

    def refuse(what: str, error: str) -> None:
        refused.append(f"{what} (refused)")
        raise RuntimeError(f"the grading kernel refused {error}: the submission {what}")

    def requested(source: str) -> bool:
        """Whether the kernel is running the grader's own cell (not a call from the submission's code)."""
        kernel = get(state.shell, "kernel", None)
        if kernel is None or not hasattr(kernel, "get_parent"):
            return True
        content = (kernel.get_parent("shell") or {}).get("content", {})
        return content.get("code", source) == source

    def cleanup() -> None:
        shell = state.shell
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(modules["sys"], name):
                delattr(modules["sys"], name)
        for name in ("InteractiveTB", "SyntaxTB"):
            printer = get(shell, name, None)
            for part in (printer, *vars(printer).values()) if hasattr(printer, "__dict__") else ():
                if isinstance(get(part, "tb", None), traceback_type):
                    part.tb = None
        if hasattr(shell, "_last_traceback"):
            shell._last_traceback = None
        result = get(shell, "last_execution_result", None)
        if result is not None and hasattr(result, "error_in_exec"):
            result.error_in_exec = None
        state.user_ns.pop(HELPERS, None)
        state.user_ns.pop(TEST_FUNCTION, None)

    def protocol(event: str, args: tuple) -> None:
        if event == prefix + "installed":
            args[0].append(True)
        elif event == prefix + "check":
            index, hidden, box = args
            if phase[0] != "idle" or not requested(guard_source(index, hidden)):
                refused.append("called the grader's checks itself, out of their order")
            problems = verify(full=True)
            if problems:
                box.append(problems)
                return
            phase[0] = "armed"
            state.armed = test["hidden"] = tuple(hidden)
            state.user_ns[HELPERS] = helpers
            box.append(answer("check", index))
        elif event == prefix + "compiled":
            if phase[0] != "armed":
                refused.append("drove the grader's test-cell protocol itself")
            phase[0], test["file"], test["pins"] = "test", args[0], []
        elif event == prefix + "pin":
            if phase[0] == "test":
                scrub_record(state.shell, test["hidden"])
            space = state.user_ns
            for name in args[0] if phase[0] == "test" else ():
                found = space.get(name, missing)
                if isinstance(found, module_type | function_type | builtin_type | type):
                    test["pins"].append((item, space, name, found, f"the name {name!r}"))
        elif event == prefix + "run":
            if phase[0] != "test" or test["codes"] is not None or not isinstance(args[0], code_type):
                refused.append("drove the grader's test-cell protocol itself")
                return
            codes, pending = [], [args[0]]
            while pending:
                code = pending.pop()
                codes.append(code)
                pending += [c for c in code.co_consts if isinstance(c, code_type)]
            test["keep"] = codes  # alive while the test runs: no id is reused
            test["codes"] = state.test_codes = frozenset(id(code) for code in codes)
        elif event == prefix + "verify":
            if phase[0] != "test":
                refused.append("called the grader's in-test check itself, outside a test")
            flags["verify"] = False
            args[0].append(verify(full=False))
        elif event == prefix + "pending":
            flags["verify"] = True
        elif event == prefix + "close":
            index, box = args
            if phase[0] != "test" or not requested(closing_source(index)):
                refused.append("called the grader's checks itself, out of their order")
            problems = verify(full=True)
            cleanup()
            phase[0], test["file"], test["pins"], state.armed = "idle", None, [], None
            flags["verify"] = False
            test["codes"], test["keep"], state.test_codes = None, None, no_codes
            box.append(problems or answer("close", index))

    def hook(event: str, args: tuple) -> None:
        if event not in watched_events and not event.startswith(prefix):
            return
        if event == "object.__getattr__":  # the most frequent event (every read of a function's __code__)
            if phase[0] != "test" or args[1] not in frame_attributes:
                return
        elif event == "object.__setattr__":
            if args[1] not in function_attributes or id(args[0]) not in protected:
                return
        elif event == "open":
            path = args[0]
            path = path.decode(errors="replace") if isinstance(path, bytes) else path
            if not (isinstance(path, str) and path.startswith("/proc/") and path.endswith("/mem")):
                return
        elif event in frame_events and phase[0] != "test":
            return
        if owner[0] is not None and owner[0] == get_ident():
            return  # an event of the hook's own work
        owner[0] = get_ident()
        try:
            if event.startswith(prefix):
                protocol(event, args)
            elif event == "open":
                refuse("tried to open the kernel's memory (/proc/.../mem)", f"to open {args[0]!r}")
            elif event == "object.__setattr__":
                label = protected[id(args[0])]
                refuse(f"tried to replace the {args[1]} of {label}", f"to replace the {args[1]} it uses")
            elif event == "object.__getattr__":
                if caller_untrusted():
                    refuse(f"tried to look at the test's frames while it ran ({args[1]})", f"access to {args[1]}")
            elif event in gc_events:
                if caller_untrusted():
                    refuse(f"tried to search the interpreter's objects ({event})", f"{event}()")
            elif event in frame_events:
                if phase[0] == "test" and caller_untrusted():
                    refuse(f"tried to look at the test's frames while it ran ({event})", f"{event}()")
            elif event == "sys.addaudithook":
                if caller_untrusted():
                    refused.append("tried to add an audit hook (code that watches the interpreter) (refused)")
                raise RuntimeError("the grading kernel takes no further audit hooks")
        finally:
            owner[0] = None

    return hook


# ---------------------------------------------------------------------------------------
# the test cell: scrubbed, and rewritten into a function whose values are inspected


class _CellHook:
    """IPython's AST transformer: rewrites the one cell after a check (a test cell), leaves others alone."""

    __slots__ = ("state",)

    def __init__(self, state: _State):
        self.state = state

    def visit(self, node):  # IPython calls visit() on the whole module once per cell
        state = self.state
        hidden = state.armed
        if hidden is None or not isinstance(node, ast.Module):
            return node
        state.armed = None
        try:
            filename, semicolon = _scrub(state.shell, hidden)
            sys.audit(EVENT + "compiled", filename)
            return _rewrite(node, show=not semicolon)
        except Exception as error:  # never let IPython unregister the transformer: the test fails instead
            message = f"Grader problem: the grader could not prepare this test ({type(error).__name__}: {error})"
            failing = ast.parse(f"raise {GradingIntegrityError.__name__}({message!r})")
            failing.body.insert(0, ast.parse(f"from {__name__} import {GradingIntegrityError.__name__}").body[0])
            return failing


def _cell_name(shell) -> str | None:
    """The ``linecache`` name IPython gave the cell being compiled."""
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return next(reversed(names), None) if names else None


def _blank(text: str, hidden: set[int], offset: int = 0) -> str:
    return "\n".join("" if i + offset in hidden else line for i, line in enumerate(text.split("\n")))


def _ends_with_semicolon(text: str) -> bool:
    """IPython's rule: a cell whose last token is ``;`` displays nothing."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return False
    skip = (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)
    last = next((t for t in reversed(tokens) if t.type not in skip), None)
    return last is not None and last.type == tokenize.OP and last.string == ";"


def _scrub(shell, hidden: tuple[int, ...]) -> tuple[str | None, bool]:
    """Blank a test cell's hidden lines wherever the kernel keeps its source; (its linecache name, ends in ;)."""
    lines = set(hidden)
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    info = getattr(result, "info", None)
    raw = getattr(info, "raw_cell", None) or ""
    name = _cell_name(shell)
    entry = linecache.cache.get(name) if name else None
    text = "".join(entry[2]) if entry else raw
    semicolon = _ends_with_semicolon(text)
    if not lines:
        return name, semicolon
    if entry:  # IPython drops a cell's leading empty lines before it compiles it
        offset = len(raw.split("\n")) - len(raw.lstrip("\n\r\t ").split("\n")) if raw else 0
        kept = ["\n" if i + offset in lines else line for i, line in enumerate(entry[2])]
        linecache.cache[name] = (entry[0], None, kept, name)
    kernel = getattr(shell, "kernel", None)
    parent = kernel.get_parent("shell") if kernel is not None and hasattr(kernel, "get_parent") else None
    content = parent.get("content") if isinstance(parent, dict) else None
    if isinstance(content, dict) and isinstance(content.get("code"), str):
        content["code"] = _blank(content["code"], lines)
    return name, semicolon


def _scrub_execution_record(shell, hidden: tuple[int, ...]) -> None:
    """Blank the hidden lines in IPython's record of the running cell (it exists only once the cell runs)."""
    info = getattr(getattr(getattr(shell, "displayhook", None), "exec_result", None), "info", None)
    for attr in ("raw_cell", "transformed_cell") if hidden and info is not None else ():
        if isinstance(getattr(info, attr, None), str):
            setattr(info, attr, _blank(getattr(info, attr), set(hidden)))


def _helper(local: bool, index: int, node: ast.AST, *args: ast.expr, keywords: list | None = None) -> ast.Call:
    """``__course_g__[index](*args)`` (inside the test's function) or ``__course_grading__[index](*args)``."""
    tuple_ = ast.Name(id=LOCAL if local else HELPERS, ctx=ast.Load())
    func = ast.Subscript(value=tuple_, slice=ast.Constant(index), ctx=ast.Load())
    return ast.copy_location(ast.Call(func=func, args=list(args), keywords=keywords or []), node)


# builtins that act on the frame that calls them: called by the test itself, then everything is compared
_FRAME_BUILTINS = frozenset({"super", "locals", "globals", "vars", "dir", "eval", "exec", "breakpoint"})


class _Rewriter(ast.NodeTransformer):
    """Routes every value a test reads, every call, attribute, item, assert and comparison through the helpers."""

    def __init__(self, local: bool):
        self.local = local

    def _wrap(self, index: int, node: ast.expr, *args: ast.expr) -> ast.Call:
        return _helper(self.local, index, node, *(args or (node,)))

    def visit_Name(self, node: ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id not in (HELPERS, LOCAL):
            return self._wrap(VALUE, node)
        return node

    def visit_Call(self, node: ast.Call):
        frame = isinstance(node.func, ast.Name) and node.func.id in _FRAME_BUILTINS
        self.generic_visit(node)
        if frame:  # ``super()``, ``locals()``, ``eval(...)`` must run in the test's own frame
            return self._wrap(RETURNED, node)
        ready = _helper(self.local, CALL, node, node.func, *node.args, keywords=node.keywords)
        return self._wrap(AFTER, node, ast.copy_location(ast.Call(func=ready, args=[], keywords=[]), node))

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        node.value = self._wrap(MARK, node.value, node.value)
        return self._wrap(AFTER, node)

    def visit_Subscript(self, node: ast.Subscript):
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        node.value = self._wrap(MARK, node.value, node.value)
        if not isinstance(node.slice, ast.Slice):
            node.slice = self._wrap(KEY, node.slice, node.slice)
        return self._wrap(AFTER, node)

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        op = type(node.ops[0]).__name__
        if len(node.ops) == 1 and op in _OPERATORS:
            return self._wrap(COMPARE, node, node.left, ast.Constant(op), node.comparators[0])
        return node

    def visit_Assert(self, node: ast.Assert):
        self.generic_visit(node)
        node.test = self._wrap(TRUTH, node.test, node.test)
        return node


class _TopLevel(ast.NodeVisitor):
    """Finds what a function body cannot hold: top-level await, yield, return, nonlocal, ``import *``."""

    def __init__(self):
        self.blocked = False

    def generic_visit(self, node):
        if isinstance(node, ast.Await | ast.AsyncFor | ast.AsyncWith | ast.Yield | ast.YieldFrom | ast.Return
                      | ast.Nonlocal):  # fmt: skip
            self.blocked = True
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            self.blocked = True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            super().generic_visit(node)

    def visit_Module(self, node):
        for statement in node.body:
            self.visit(statement)


class _FirstUse(ast.NodeVisitor):
    """How the test's own scope first uses each name, in the order Python evaluates it: load, store or del.

    Nested scopes (function, lambda and class bodies, comprehensions past their first iterable)
    are not the test's own, except for what they evaluate where they are defined (decorators,
    defaults, bases) and the targets of ``:=``, which bind in the test's scope.
    """

    def __init__(self):
        self.first: dict[str, str] = {}

    def use(self, name: str, how: str) -> None:
        self.first.setdefault(name, how)

    def visit_Name(self, node: ast.Name):
        self.use(node.id, {ast.Load: "load", ast.Store: "store", ast.Del: "del"}[type(node.ctx)])

    def visit_Assign(self, node: ast.Assign):
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node: ast.AugAssign):
        if isinstance(node.target, ast.Name):
            self.use(node.target.id, "load")  # ``x += 1`` reads x first
        else:
            self.visit(node.target)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is not None:
            self.visit(node.value)
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr):
        self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor):
        self.visit(node.iter)
        self.visit(node.target)
        for statement in (*node.body, *node.orelse):
            self.visit(statement)

    visit_AsyncFor = visit_For

    def _definition(self, node, name: str | None) -> None:
        for part in (*getattr(node, "decorator_list", ()), *getattr(node, "bases", ())):
            self.visit(part)
        for keyword in getattr(node, "keywords", ()):
            self.visit(keyword.value)
        arguments = getattr(node, "args", None)
        if isinstance(arguments, ast.arguments):
            for default in (*arguments.defaults, *[d for d in arguments.kw_defaults if d is not None]):
                self.visit(default)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            for inner in ast.walk(node):  # ``:=`` in a comprehension binds in the test's scope
                if isinstance(inner, ast.NamedExpr):
                    self.visit(inner.target)
        if name is not None:
            self.use(name, "store")

    def visit_FunctionDef(self, node):
        self._definition(node, node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda):
        self._definition(node, None)

    def _comprehension(self, node):
        self.visit(node.generators[0].iter)
        self._definition(node, None)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Import(self, node: ast.Import | ast.ImportFrom):
        for alias in node.names:
            self.use(alias.asname or alias.name.split(".")[0], "store")

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node: ast.ExceptHandler):
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.use(node.name, "store")
        for statement in node.body:
            self.visit(statement)

    def visit_MatchAs(self, node):
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self.use(node.name, "store")

    def visit_MatchStar(self, node):
        if node.name:
            self.use(node.name, "store")

    def visit_MatchMapping(self, node):
        self.generic_visit(node)
        if node.rest:
            self.use(node.rest, "store")

    def visit_Global(self, node: ast.Global):
        pass


def _function(body: list[ast.stmt], params: list[str]) -> ast.FunctionDef:
    """``def __course_test__(params): body``."""
    arguments = ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=p) for p in params], kwonlyargs=[], kw_defaults=[], defaults=[]
    )
    return ast.FunctionDef(
        name=TEST_FUNCTION, args=arguments, body=body or [ast.Pass()], decorator_list=[], returns=None, type_params=[]
    )


def _scopes(body: list[ast.stmt]) -> tuple[list[str], list[str], list[str]]:
    """(the test's own variables, the notebook's names it binds or deletes, the names it only reads).

    Module semantics where the test relies on the notebook: a name the cell declares ``global``
    (anywhere in it), or whose first use in its own scope reads or deletes it (``orig = squares;
    del squares``), is the notebook's: the test acts on the namespace at once. A name the test
    binds first is its own variable until the test ends, so code under test cannot read it.
    """
    import symtable

    declared = {name for node in ast.walk(ast.Module(body=body, type_ignores=[])) if isinstance(node, ast.Global)
                for name in node.names}  # fmt: skip
    finder = _FirstUse()
    for statement in body:
        finder.visit(statement)
    source = ast.unparse(ast.fix_missing_locations(ast.Module(body=[_function(body, [])], type_ignores=[])))
    table = symtable.symtable(source, "<test>", "exec").get_children()[0]
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_local()}
    notebook = {n for n in bound if n in declared or finder.first.get(n, "store") != "store"}
    own = bound - notebook
    written: set[str] = set(notebook)
    read: set[str] = set()
    pending = [table]
    while pending:
        scope = pending.pop()
        for symbol in scope.get_symbols():
            if symbol.is_global() and symbol.is_assigned():
                written.add(symbol.get_name())
            elif symbol.is_global() and symbol.is_referenced():
                read.add(symbol.get_name())
        pending += scope.get_children()
    skip = {n for n in bound if n.startswith("__course")}
    return sorted(own - skip), sorted(notebook - skip), sorted(read - written - own)


def _rewrite(tree: ast.Module, show: bool) -> ast.Module:
    """The test cell as a function of its own, or, when its code cannot live in one, rewritten in place."""
    body = tree.body
    last = body[-1] if body and isinstance(body[-1], ast.Expr) else None
    finder = _TopLevel()
    finder.visit(tree)
    if finder.blocked:  # top-level await or the like: rewritten in place, its value displayed by the helper
        tree = _Rewriter(local=False).visit(tree)
        if last is not None:
            end = tree.body[-1]
            tree.body[-1] = ast.copy_location(
                ast.Expr(_helper(False, DISPLAY, end, end.value, ast.Constant(show))), end
            )
        return ast.fix_missing_locations(tree)
    own, notebook, read = _scopes(body)
    body = [ast.copy_location(ast.Pass(), s) if isinstance(s, ast.Global) else s for s in body]  # declared below
    statements = [_Rewriter(local=True).visit(statement) for statement in body]
    if last is not None:
        end = statements[-1]
        statements[-1] = ast.copy_location(
            ast.Assign(targets=[ast.Name(id=RESULT, ctx=ast.Store())], value=end.value), end
        )
    prologue: list[ast.stmt] = [ast.Global(names=notebook)] if notebook else []
    for name in own:
        prologue += ast.parse(f"try:\n    {name} = {LOCAL}[{INITIAL}]({name!r})\nexcept KeyError:\n    pass").body
    prologue += ast.parse(f"{LOCAL}[{PIN}]({tuple(read)!r})").body
    export = ast.parse(f"{LOCAL}[{EXPORT}]({LOCAL}[{LOCALS}](), {tuple(own)!r})").body
    function = _function([*prologue, ast.Try(body=statements or [ast.Pass()], handlers=[], orelse=[],
                                             finalbody=export)], [LOCAL])  # fmt: skip
    if last is not None:
        function.body.append(ast.Return(value=ast.Name(id=RESULT, ctx=ast.Load())))
    call = ast.parse(f"{HELPERS}[{RUN}]({TEST_FUNCTION}, {show and last is not None!r})").body
    module = ast.Module(body=[function, *call], type_ignores=[])
    if body:
        ast.copy_location(function, body[0])
    return ast.fix_missing_locations(module)


# ---------------------------------------------------------------------------------------
# the kernel-side entry points


def _read_token() -> str | None:
    """The worker's secret for this kernel, removed from the disk as soon as it is read."""
    try:
        with open(TOKEN_FILE, encoding="ascii") as handle:
            token = handle.read().strip()
        os.unlink(TOKEN_FILE)
    except OSError:
        return None
    return token or None


def _planted(shell) -> list[str]:
    """Code a cell left for the next kernel to run before the grader's first cell (after a crash, say)."""
    import site

    found = []
    profile = getattr(shell, "profile_dir", None)
    startup = getattr(profile, "startup_dir", None)
    if startup and os.path.isdir(startup) and any(name != "README" for name in os.listdir(startup)):
        found.append("left IPython startup files (code that runs before the grader's)")
    location = getattr(profile, "location", None)
    if location and any(
        os.path.exists(os.path.join(location, f"{name}_config.py")) for name in ("ipython", "ipython_kernel")
    ):
        found.append("left an IPython configuration file (code that runs before the grader's)")
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and os.path.isdir(user_site) and os.listdir(user_site):
        found.append("left files in Python's user site-packages (.pth files run before the grader's code)")
    return [f"{what} (refused)" for what in found]


def install(shell, modules: list[str]) -> None:
    """Record what the tests rely on and install the audit hook that judges it (the grader's first cell)."""
    box: list = []
    sys.audit(EVENT + "installed", box)
    if box:
        raise GradingIntegrityError("the grader's checks were installed twice")
    token = _read_token()
    sys.addaudithook(_vault(_State(shell, modules), token, _planted(shell)))


def _answer(box: list, during: bool = False) -> str:
    if not box:
        raise GradingIntegrityError("the grader's checks are missing: the tests cannot be trusted")
    if isinstance(box[0], str):
        return box[0]
    raise GradingIntegrityError(_message(box[0], during))


def check(index: int = 0, hidden: tuple[int, ...] = ()) -> str:
    """Before a test cell: fail if anything the tests rely on changed, else arm the transformer.

    Returns the answer the executor checks (``digest`` of the kernel's secret, ``check`` and
    ``index``), which only the audit hook can compute.
    """
    box: list = []
    sys.audit(EVENT + "check", int(index), tuple(int(i) for i in hidden), box)
    return _answer(box)


def close(index: int = 0) -> str:
    """After a test cell: fail if anything changed while it ran, and clear what it left in the kernel."""
    box: list = []
    sys.audit(EVENT + "close", int(index), box)
    return _answer(box, during=True)
