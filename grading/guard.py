"""The grader's own code inside the grading kernel: tamper checks before every test cell, and
a watch on the values each test cell compares, so that objects that lie earn no points.

Contract, grader side: ``preamble(sources)`` is the source of the first cell the grader
runs, before any learner code; ``guard(index)`` is the source of the cell it runs right
before every test cell (``index``: the guard cell's position in the notebook). The guard
cell answers with ``digest(token, index)``, an HMAC of a secret the worker hands the
kernel in ``TOKEN_FILE`` (read and deleted by ``install``, before any learner code runs):
the executor fails every later test when the answer is missing or wrong, so a submission
that replaces the guard (say, through ``builtins.__import__``) without finding the secret
in the kernel's memory is caught from outside the kernel. Kernel side (this module is
imported inside the kernel; it only imports the standard library until ``install`` is
told which modules the notebook uses):

* ``install`` records the objects the tests rely on: comparison functions of torch, numpy
  and math, the ``course_utils.checks`` helpers and the references they bound, a few
  builtins, the modules in ``sys.modules``, IPython's execution and error machinery
  (``run_cell``, ``showtraceback``, the AST and input transformers, the event callbacks),
  the trace function, and torch's function and dispatch mode stacks;
* ``check`` compares them again. If anything was replaced it raises
  ``GradingIntegrityError`` naming what changed (the grader then scores this test cell
  and every later one 0 without running it). Otherwise it arms a transformer for the next
  cell (the test cell) only;
* the armed transformer rewrites that test cell's AST so that every value the test uses
  (each name, call result, attribute and item it reads), each ``assert`` and each single
  comparison passes through ``inspect_value``/``compare``/``truth`` first. These raise
  ``GradingIntegrityError`` (the test scores 0, the note says what was found) on an
  object that can lie about comparisons:

  - an instance of a ``torch.Tensor`` subclass defined outside installed code (in the
    notebook, or in a file beside it) that redefines ``__torch_function__``,
    ``__torch_dispatch__`` or anything ``torch.Tensor`` has (``item``, ``shape``,
    ``allclose``, ``__eq__``, ...);
  - an instance of a subclass of a plain value type (``int``, ``float``, ``str``,
    ``tuple``, ``list``, ``dict``, numpy arrays, ...) defined outside installed code that
    redefines how it compares or converts (``__eq__``, ``__float__``, ``__index__``, ...);
  - any object whose class, defined outside installed code, implements torch's or numpy's
    override protocols (``__torch_function__``, ``__array_function__``, ...);
  - in a single comparison (``a == b``, ``a < b``, ``a in b``) with a plain value on the
    other side, an object whose class, defined outside installed code, defines its own
    comparison (an ``__eq__`` that always returns True).

  Two objects of classes the notebook defined may still be compared with each other (an
  exercise that asks for a ``Fraction`` with ``__eq__``); values inside containers are
  inspected to a bounded depth and length.

This is a tripwire and a filter for the attacks a learner can write, not a proof: code
running in the same interpreter can in principle reach the grader's state too. The
README's threat model says so, and what escapes it.
"""

from __future__ import annotations

import ast
import os
import sys
import types

__all__ = [
    "ROLE_KEY",
    "TOKEN_FILE",
    "GradingIntegrityError",
    "check",
    "digest",
    "guard",
    "install",
    "preamble",
    "watched_modules",
]

ROLE_KEY = "course_grading"
HELPERS = "__course_grading__"  # the name the rewritten test cell calls the checks through
TOKEN_FILE = ".course-grading-token"  # in the kernel's working directory until ``install`` reads it

_MAX_ITEMS = 10_000  # elements of one container inspected
_MAX_DEPTH = 6


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


def guard(index: int) -> str:
    """The source of the guard cell at position ``index`` of the notebook."""
    return f'__import__("grading.guard", fromlist=["check"]).check({int(index)})'


def digest(token: str | None, index: int) -> str:
    """What the guard cell at ``index`` answers when the secret is ``token``."""
    import hashlib
    import hmac

    return hmac.new((token or "").encode(), str(index).encode(), hashlib.sha256).hexdigest()[:32]


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
    for name in ("course_utils", "grading"):
        package = sys.modules.get(name)
        if package is not None and getattr(package, "__path__", None):
            roots.update(os.path.dirname(p) for p in package.__path__)
    resolved = {os.path.realpath(r).rstrip(os.sep) + os.sep for r in roots if r}
    return tuple(sorted(r for r in resolved if r != os.sep))  # "/" as a prefix would trust everything


def _installed_file(filename: object, roots: tuple[str, ...]) -> bool:
    return isinstance(filename, str) and os.path.realpath(filename).startswith(roots)


def _code_files(value: object) -> list[object]:
    """The source files of the Python code behind ``value`` (a function, property, classmethod, ...)."""
    files = []
    for item in (value, getattr(value, "__func__", None), getattr(value, "fget", None), getattr(value, "func", None)):
        code = getattr(item, "__code__", None)
        if isinstance(code, types.CodeType):
            files.append(code.co_filename)
    return files


# ---------------------------------------------------------------------------------------
# kernel-side state, set by install()


class _State:
    def __init__(self, shell, modules: list[str]):
        import builtins
        import math

        self.token = _read_token()
        self.shell = shell
        self.roots = _trusted_roots()
        self.armed = False
        self.verdicts: dict[type, tuple[str | None, str | None]] = {}
        self.plain: set[type] = {
            int, float, complex, bool, str, bytes, bytearray, type(None), type(NotImplemented), type(Ellipsis),
            range, slice, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
            types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
            types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
            types.GeneratorType, types.CodeType, types.SimpleNamespace, property, classmethod, staticmethod,
        }  # fmt: skip
        self.containers = (list, tuple, dict, set, frozenset)
        self.value_bases: list[type] = [int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset]
        self.protocol = {
            "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__", "__contains__",
            "__hash__", "__int__", "__float__", "__complex__", "__index__", "__abs__", "__round__", "__trunc__",
            "__floor__", "__ceil__", "__neg__", "__pos__", "__sub__", "__rsub__", "__add__", "__radd__",
            "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__iter__", "__getitem__", "__array__",
            "__array_function__", "__array_ufunc__", "__array_interface__", "__array_priority__",
            "__torch_function__", "__torch_dispatch__", "__getattr__", "__getattribute__", "__instancecheck__",
        }  # fmt: skip
        self.overrides = {"__torch_function__", "__torch_dispatch__", "__array_function__", "__array_ufunc__"}
        self.compares = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__"}
        self.tensor_api: set[str] = set()
        self.tensor_types: tuple[type, ...] = ()
        self.harmless = {
            "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__init__", "__new__", "__repr__",
            "__str__", "__format__", "__slots__", "__annotations__", "__init_subclass__", "__class_getitem__",
            "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__", "__reduce__",
            "__reduce_ex__", "__deepcopy__", "__copy__", "__dir__", "__sizeof__", "__setstate__", "__getstate__",
        }  # fmt: skip

        watched = {}
        for name in ("isinstance", "issubclass", "type", "len", "abs", "float", "int", "bool", "round", "repr",
                     "AssertionError", "__import__", "__build_class__"):  # fmt: skip
            watched[f"builtins.{name}"] = (builtins, name)
        watched["math.isclose"] = (math, "isclose")
        for name in ("showtraceback", "run_cell", "run_cell_async", "run_code", "run_ast_nodes", "transform_ast",
                     "transform_cell", "_run_cell"):  # fmt: skip
            if hasattr(shell, name):
                watched[f"IPython shell.{name}"] = (shell, name)
        kernel = getattr(shell, "kernel", None)
        if kernel is not None:
            watched["ipykernel do_execute"] = (kernel, "do_execute")
        module_names = ["builtins", "math", "sys", "os"]
        namespace: dict[str, object] = {"math": math}

        if "numpy" in modules or "torch" in modules:
            import numpy
            import numpy.testing

            self.plain.add(numpy.ndarray)
            self.plain.update(t for t in vars(numpy).values() if isinstance(t, type) and issubclass(t, numpy.generic))
            self.plain.update({numpy.dtype, type(numpy.dtype("float32"))})
            self.value_bases += [numpy.ndarray, numpy.generic]
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

            self.torch = torch
            self.plain.update({torch.Tensor, torch.nn.Parameter, torch.Size, torch.dtype, torch.device})
            self.plain.update({torch.Generator, torch.finfo, torch.iinfo, torch.layout, torch.memory_format})
            self.value_bases.insert(0, torch.Tensor)
            self.tensor_types = (torch.Tensor,)
            self.tensor_api = set(dir(torch.Tensor)) - self.harmless
            for name in ("allclose", "equal", "isclose", "eq", "ne", "all", "any"):
                watched[f"torch.{name}"] = (torch, name)
            watched["torch.testing.assert_close"] = (torch.testing, "assert_close")
            for name in ("__eq__", "__ne__", "__bool__", "__torch_function__", "allclose", "equal", "item",
                         "tolist", "eq", "all"):  # fmt: skip
                watched[f"torch.Tensor.{name}"] = (torch.Tensor, name)
            watched["torch.Tensor.shape"] = (torch.Tensor, "shape")
            module_names += ["torch", "torch.testing"]
            namespace["torch"] = torch
        if "course_utils" in modules:
            import course_utils
            import course_utils.checks as checks

            for name in dir(checks):
                if name.startswith(("check_", "_assert_close", "_isclose", "_strictly_equal", "_PLAIN", "_true_")):
                    watched[f"course_utils.checks.{name}"] = (checks, name)
                    if name in getattr(course_utils, "__all__", ()):
                        watched[f"course_utils.{name}"] = (course_utils, name)
            module_names += ["course_utils", "course_utils.checks"]
            namespace.update({name: getattr(checks, name) for name in dir(checks) if name.startswith("check_")})

        watched["builtins.compile"] = (builtins, "compile")
        compiler = getattr(shell, "compile", None)
        if compiler is not None:
            watched["IPython shell.compile"] = (shell, "compile")
            for name in ("ast_parse", "__call__", "cache"):
                if hasattr(type(compiler), name):
                    watched[f"IPython compiler.{name}"] = (type(compiler), name)
        for owner, name in ((ast.NodeTransformer, "generic_visit"), (ast.NodeVisitor, "visit"),
                            (ast, "fix_missing_locations"), (ast, "copy_location")):  # fmt: skip
            watched[f"ast.{getattr(owner, '__name__', 'ast')}.{name}"] = (owner, name)

        self.watched = watched
        self.original = {key: getattr(owner, attr, None) for key, (owner, attr) in watched.items()}
        self.modules = {name: sys.modules.get(name) for name in [*module_names, "ast", __name__]}
        self.namespace = namespace
        self.transformer = _TestCellTransformer(self)
        shell.ast_transformers.append(self.transformer)
        self.lists = self._lists()
        self.events = {event: list(callbacks) for event, callbacks in shell.events.callbacks.items()}
        self.trace = (sys.gettrace(), sys.getprofile())
        self.helpers = types.SimpleNamespace(value=self.inspect_value, compare=self.compare, truth=self.truth)
        self.fingerprint = self._fingerprint()

    # -- tampering ----------------------------------------------------------------------

    def _modes(self) -> list[object]:
        """torch's active function and dispatch modes (``torch.set_default_device`` leaves one, say)."""
        torch = getattr(self, "torch", None)
        if torch is None:
            return []
        modes = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
        return modes + [torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())]

    def _trusted(self, value: object) -> bool:
        """Whether a callable or object comes from installed code (torch, matplotlib, ...), not the submission."""
        files = _code_files(value)
        if files:
            return all(_installed_file(f, self.roots) for f in files)
        if isinstance(value, types.BuiltinFunctionType | types.BuiltinMethodType | types.MethodWrapperType):
            return True  # C code of the interpreter or an extension: nothing a submission wrote
        cls = value if isinstance(value, type) else type(value)
        module = sys.modules.get(getattr(cls, "__module__", "") or "")
        if cls.__module__ == "__main__" or not _installed_file(getattr(module, "__file__", None), self.roots):
            return False
        return all(_installed_file(f, self.roots) for klass in cls.__mro__ for v in vars(klass).values()
                   for f in _code_files(v))  # fmt: skip

    def _added_untrusted(self, now: list, before: list) -> bool:
        return any(not self._trusted(item) for item in now if not any(item is old for old in before))

    def tampering(self) -> list[str]:
        shell = self.shell

        def same(a, b):
            return a is b or (getattr(a, "__func__", None) is not None and a.__func__ is getattr(b, "__func__", None))

        original = self.original
        watched = self.watched.items()
        changed = [key for key, (obj, attr) in watched if not same(getattr(obj, attr, None), original[key])]
        changed += [f"sys.modules[{name!r}]" for name, mod in self.modules.items() if sys.modules.get(name) is not mod]
        user = shell.user_ns
        names = self.namespace.items()
        changed += [f"the name {name!r}" for name, value in names if user.get(name, value) is not value]
        if getattr(shell, "custom_exceptions", ()) != ():
            changed.append("IPython custom exception handler (set_custom_exc)")
        # libraries may add their own hooks (matplotlib's inline backend adds an event callback,
        # torch.set_default_device a function mode): only the submission's own code is refused
        lists = self._lists()
        if self.transformer not in lists.get("ast_transformers", []) or any(
            self._added_untrusted(items, self.lists.get(name, [])) for name, items in lists.items()
        ):
            changed.append("IPython's input or AST transformers (code that rewrites cells)")
        for event, callbacks in shell.events.callbacks.items():
            if self._added_untrusted(list(callbacks), self.events.get(event, [])):
                changed.append("IPython event callbacks (code that runs around each cell)")
                break
        hooks = [hook for hook in (sys.gettrace(), sys.getprofile()) if hook is not None]
        if self._added_untrusted(hooks, [hook for hook in self.trace if hook is not None]):
            changed.append("the interpreter's trace or profile function")
        if any(not self._trusted(mode) for mode in self._modes()):
            changed.append("torch's function or dispatch mode stack (a TorchFunctionMode left active)")
        if self._fingerprint() != self.fingerprint:
            changed.append("the grader's own checks")
        return changed

    def _lists(self) -> dict[str, list]:
        """IPython's lists of code that rewrites a cell before it runs, copied."""
        shell = self.shell
        lists = {name: list(getattr(shell, name)) for name in ("ast_transformers", "input_transformers_cleanup",
                                                                 "input_transformers_post")
                 if isinstance(getattr(shell, name, None), list)}  # fmt: skip
        manager = getattr(shell, "input_transformer_manager", None)
        for name, value in vars(manager).items() if manager is not None else ():
            if isinstance(value, list):
                lists[f"input_transformer_manager.{name}"] = list(value)
        return lists

    def _fingerprint(self) -> tuple:
        """Everything the checks themselves rely on (their code, their tables, the helpers the cells call)."""
        code = tuple(
            (cls.__name__, name, value)
            for cls in (_State, _TestCellTransformer)
            for name, value in sorted(vars(cls).items())
            if callable(value)
        )
        tables = tuple(
            frozenset(getattr(self, name))
            for name in ("plain", "value_bases", "protocol", "overrides", "compares", "tensor_api", "harmless")
        )
        module = (globals().get("check"), globals().get("install"), tuple(_OPERATORS.items()), GradingIntegrityError)
        helpers = tuple(sorted(vars(self.helpers).items()))
        return code, tables, module, helpers, self.roots, self.tensor_types, self.containers

    # -- lying objects ------------------------------------------------------------------

    def _class_verdict(self, cls: type) -> tuple[str | None, str | None]:
        """(why its values cannot be trusted anywhere, why they cannot be compared with plain values)."""
        if cls in self.verdicts:
            return self.verdicts[cls]
        anywhere = versus_plain = None
        is_value = any(issubclass(cls, base) for base in self.value_bases)
        is_tensor = bool(self.tensor_types) and issubclass(cls, self.tensor_types)
        for klass in cls.__mro__:
            if klass is object or klass in self.plain or klass in self.value_bases:
                continue
            names = set(vars(klass))
            module_name = getattr(klass, "__module__", None) or ""
            module = sys.modules.get(module_name)
            installed = _installed_file(getattr(module, "__file__", None), self.roots)
            defined_outside = module_name == "__main__" or not installed
            redefined = names & (self.tensor_api | self.protocol if is_tensor else self.protocol)
            if not defined_outside:
                redefined = {n for n in redefined if any(not _installed_file(f, self.roots)
                                                         for f in _code_files(vars(klass)[n]))}  # fmt: skip
            if not redefined:
                continue
            shown = ", ".join(sorted(redefined)[:6])
            if is_tensor:
                anywhere = anywhere or f"a torch.Tensor subclass defined in the submission that redefines {shown}"
            elif is_value:
                kind = next(base.__name__ for base in self.value_bases if issubclass(cls, base))
                anywhere = anywhere or f"a subclass of {kind} defined in the submission that redefines {shown}"
            elif redefined & self.overrides:
                anywhere = anywhere or f"an object that overrides {', '.join(sorted(redefined & self.overrides))}"
            elif redefined & self.compares:
                versus_plain = versus_plain or f"an object whose class defines its own {shown}"
        self.verdicts[cls] = (anywhere, versus_plain)
        return anywhere, versus_plain

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


class _TestCellTransformer(ast.NodeTransformer):
    """Rewrites the one cell after a guard (a test cell) so that its values are inspected."""

    def __init__(self, state: _State):
        self.state = state

    def visit(self, node):  # IPython calls visit() on the whole module once per cell
        if isinstance(node, ast.Module):
            if not self.state.armed:
                return node
            self.state.armed = False
            self.state.verdicts.clear()
            try:
                return ast.fix_missing_locations(self.generic_visit(node))
            except Exception:  # never let IPython unregister the transformer; the cell runs unrewritten
                return node
        return super().visit(node)

    @staticmethod
    def _helper(name: str, node: ast.AST, *args: ast.expr) -> ast.Call:
        func = ast.Attribute(value=ast.Name(id=HELPERS, ctx=ast.Load()), attr=name, ctx=ast.Load())
        return ast.copy_location(ast.Call(func=func, args=list(args), keywords=[]), node)

    def _wrap(self, node: ast.expr) -> ast.expr:
        return self._helper("value", node, node)

    def visit_Name(self, node: ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id != HELPERS:
            return self._wrap(node)
        return node

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        return self._wrap(node)

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        return self._wrap(node) if isinstance(node.ctx, ast.Load) else node

    def visit_Subscript(self, node: ast.Subscript):
        self.generic_visit(node)
        return self._wrap(node) if isinstance(node.ctx, ast.Load) else node

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        op = type(node.ops[0]).__name__
        if len(node.ops) == 1 and op in _OPERATORS:
            return self._helper("compare", node, node.left, ast.Constant(op), node.comparators[0])
        return node

    def visit_Assert(self, node: ast.Assert):
        self.generic_visit(node)
        node.test = self._helper("truth", node.test, node.test)
        return node


_state: _State | None = None


def _read_token() -> str | None:
    """The worker's secret for this kernel, removed from the disk as soon as it is read."""
    try:
        with open(TOKEN_FILE, encoding="ascii") as handle:
            token = handle.read().strip()
        os.unlink(TOKEN_FILE)
    except OSError:
        return None
    return token or None


def install(shell, modules: list[str]) -> None:
    """Record the originals and register the test-cell transformer (the grader's first cell)."""
    global _state
    if _state is not None:
        raise GradingIntegrityError("the grader's checks were installed twice")
    _state = _State(shell, modules)


def check(index: int = 0) -> str:
    """Before a test cell: fail if anything the tests rely on was replaced, else arm the transformer.

    Returns the answer the executor checks (``digest`` of the kernel's secret and ``index``).
    """
    state = _state
    if state is None:
        raise GradingIntegrityError("the grader's checks are missing: the tests cannot be trusted")
    changed = state.tampering()
    if changed:
        raise GradingIntegrityError(
            "the submission replaced " + ", ".join(dict.fromkeys(changed)) + ": the tests cannot be trusted from "
            "here on, so this and every later test scores 0"
        )
    state.shell.user_ns[HELPERS] = state.helpers
    state.armed = True
    return digest(state.token, index)
