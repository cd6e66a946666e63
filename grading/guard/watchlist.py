"""The watch list: what the tests rely on, as tables, and ``Watch``, which finds it in one kernel.

Contract: the tables below are data (names, immutable); ``Watch(shell, modules)`` resolves
them against the running IPython shell and the heavy modules the notebook uses (``modules``:
``watched_modules``' answer; numpy and torch are imported only when named) into what
``install`` records: ``watched`` (label -> (owner, attribute), in the order they are recorded),
``lazy`` (a package's lazy exports), ``module_names`` (their ``sys.modules`` entries),
``namespace`` (names the notebook may bind to these), and the types the checks on objects
that lie treat as plain values (``plain``, ``value_bases``, ``data``, ``tensor_types``,
``tensor_api``). A label is what a verdict names when the thing behind it changed.
"""

from __future__ import annotations

import builtins
import math
import sys
import types

# (needs, owner, label, names, optional): the attributes ``names`` of ``owner`` are recorded as ``label``
# formatted with the name. ``needs``: "" always, "numpy" when the notebook uses numpy or torch, "torch" when
# torch. ``owner``: a dotted path from a module (imported by then) or from the IPython ``shell``; a row whose
# owner is missing is skipped, and so is a name its owner lacks where ``optional``.
WATCHED: tuple[tuple[str, str, str, tuple[str, ...], bool], ...] = (
    ("", "builtins", "builtins.{}", ("isinstance", "issubclass", "type", "len", "abs", "float", "int", "bool",
                                     "round", "repr", "AssertionError", "__import__", "__build_class__", "compile",
                                     "locals", "getattr"), False),
    ("", "math", "math.{}", ("isclose",), False),
    ("", "shell", "IPython shell.{}", ("showtraceback", "_showtraceback", "run_cell", "run_cell_async", "run_code",
                                       "run_ast_nodes", "transform_ast", "transform_cell", "_run_cell", "compile",
                                       "displayhook", "display_pub", "display_formatter", "InteractiveTB",
                                       "custom_exceptions"), True),
    ("", "shell.kernel", "ipykernel {}", ("do_execute", "send_response", "session", "get_parent"), True),
    ("", "shell.kernel.session", "ipykernel session.{}", ("send",), False),
    ("", "ast.NodeTransformer", "ast.NodeTransformer.{}", ("generic_visit",), False),
    ("", "ast.NodeVisitor", "ast.NodeVisitor.{}", ("visit",), False),
    ("", "ast", "ast.ast.{}", ("parse", "fix_missing_locations", "copy_location", "unparse"), False),
    ("", "linecache", "linecache.{}", ("cache",), False),
    ("", "shell.displayhook", "IPython displayhook.{}", ("compute_format_data", "start_displayhook",
                                                        "write_format_data", "finish_displayhook"), True),
    ("numpy", "numpy", "numpy.{}", ("allclose", "isclose", "array_equal", "array_equiv", "equal"), False),
    ("numpy", "numpy.testing", "numpy.testing.{}", ("assert_allclose", "assert_array_equal", "assert_equal",
                                                    "assert_almost_equal", "assert_array_almost_equal"), False),
    ("torch", "torch", "torch.{}", ("allclose", "equal", "isclose", "eq", "ne", "all", "any"), False),
    ("torch", "torch.testing", "torch.testing.{}", ("assert_close",), False),
    ("torch", "torch.Tensor", "torch.Tensor.{}", ("__eq__", "__ne__", "__bool__", "__torch_function__", "allclose",
                                                  "equal", "item", "tolist", "eq", "all", "shape", "dtype", "detach",
                                                  "cpu"), False),
)  # fmt: skip
# ``course_utils.checks``' functions whose names start so (and their lazy exports from ``course_utils``)
CHECKS = ("check_", "forbidden_calls", "_assert_close", "_isclose", "_strictly_equal", "_PLAIN", "_true_")
MODULE_NAMES = ("builtins", "math", "sys", "os", "ast", "linecache", "types")  # their sys.modules entries
NUMPY_MODULES = ("numpy", "numpy.testing")
TORCH_MODULES = ("torch", "torch.testing")
COURSE_MODULES = ("course_utils", "course_utils.checks")

# values of these types are plain: never a lie (numpy's scalar types and torch's are added when loaded)
PLAIN: frozenset[type] = frozenset({
    int, float, complex, bool, str, bytes, bytearray, type(None), type(NotImplemented), type(Ellipsis),
    range, slice, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
    types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
    types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
    types.GeneratorType, types.CodeType, types.SimpleNamespace, property, classmethod, staticmethod,
})  # fmt: skip
TORCH_PLAIN = ("Tensor", "nn.Parameter", "Size", "dtype", "device", "Generator", "finfo", "iinfo", "layout",
               "memory_format")  # fmt: skip
CONTAINERS = (list, tuple, dict, set, frozenset)
# a subclass of one of these that redefines how it compares or converts is a lie (torch.Tensor goes first)
VALUE_BASES: tuple[type, ...] = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)
# plain data: values whose use runs no code of the submission's (see ``_State._data``)
DATA: frozenset[type] = frozenset({int, float, complex, bool, str, bytes, type(None), range, slice})
TORCH_DATA = ("Tensor", "nn.Parameter", "Size", "dtype", "device")

# what a class of the submission's may not redefine, for values compared or converted by the tests
PROTOCOL = frozenset({
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__", "__contains__",
    "__hash__", "__int__", "__float__", "__complex__", "__index__", "__abs__", "__round__", "__trunc__",
    "__floor__", "__ceil__", "__neg__", "__pos__", "__sub__", "__rsub__", "__add__", "__radd__",
    "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__iter__", "__getitem__", "__array__",
    "__array_function__", "__array_ufunc__", "__array_interface__", "__array_priority__",
    "__torch_function__", "__torch_dispatch__", "__getattr__", "__getattribute__", "__instancecheck__",
    "__class__",
})  # fmt: skip
OVERRIDES = frozenset({"__torch_function__", "__torch_dispatch__", "__array_function__", "__array_ufunc__"})
COMPARES = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__"})
# what a torch.Tensor subclass may redefine without lying
HARMLESS = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__init__", "__new__", "__repr__",
    "__str__", "__format__", "__slots__", "__annotations__", "__init_subclass__", "__class_getitem__",
    "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__", "__reduce__",
    "__reduce_ex__", "__deepcopy__", "__copy__", "__dir__", "__sizeof__", "__setstate__", "__getstate__",
})  # fmt: skip
# builtins a test may call, after which everything is compared (they run code or act on what the test sees)
DENIED = ("print", "input", "open", "exec", "eval", "compile", "__import__", "breakpoint", "help", "exit", "quit",
          "setattr", "delattr", "iter", "next")  # fmt: skip
# attributes of sys that IPython and ipykernel rebind as they run cells (not recorded)
PROCESS_STATE = frozenset({
    "excepthook", "displayhook", "breakpointhook", "unraisablehook", "stdout", "stderr", "stdin", "ps1", "ps2",
    "ps3", "last_type", "last_value", "last_traceback", "last_exc", "tracebacklimit",
})  # fmt: skip


def _owner(path: str, shell: object) -> object:
    """The object at a dotted ``path`` from the shell (``shell...``) or a loaded module, or None."""
    first, *rest = path.split(".")
    found: object = shell if first == "shell" else sys.modules.get(first)
    for part in rest:
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


def _class(root: object, path: str) -> type:
    """The class ``root.a.b`` for ``path`` ``"a.b"``."""
    for part in path.split("."):
        root = getattr(root, part)
    if not isinstance(root, type):
        raise TypeError(f"{path} is not a class")
    return root


class Watch:
    """The watch list resolved in one kernel (see the module's contract)."""

    __slots__ = ("data", "denied", "lazy", "module_names", "namespace", "plain", "tensor_api", "tensor_types",
                 "value_bases", "watched")  # fmt: skip

    def __init__(self, shell: object, modules: list[str]) -> None:
        uses_numpy = "numpy" in modules or "torch" in modules
        uses = {"": True, "numpy": uses_numpy, "torch": "torch" in modules}
        plain: set[type] = set(PLAIN)
        value_bases: list[type] = list(VALUE_BASES)
        data: set[type] = set(DATA)
        module_names: list[str] = list(MODULE_NAMES)
        namespace: dict[str, object] = {"math": math}
        self.tensor_types: tuple[type, ...] = ()
        self.tensor_api: frozenset[str] = frozenset()
        if uses_numpy:
            import numpy
            import numpy.testing

            plain.add(numpy.ndarray)
            plain.update(t for t in vars(numpy).values() if isinstance(t, type) and issubclass(t, numpy.generic))
            plain.update({numpy.dtype, type(numpy.dtype("float32"))})
            value_bases += [numpy.ndarray, numpy.generic]
            module_names += NUMPY_MODULES
            namespace.update(np=numpy, numpy=numpy)
            data.update(t for t in plain if t.__module__ == "numpy" and t is not numpy.ndarray)
        if uses["torch"]:
            import torch
            import torch.testing

            plain.update(_class(torch, name) for name in TORCH_PLAIN)
            value_bases.insert(0, torch.Tensor)
            self.tensor_types = (torch.Tensor,)
            self.tensor_api = frozenset(dir(torch.Tensor)) - HARMLESS
            module_names += TORCH_MODULES
            namespace["torch"] = torch
            data.update(_class(torch, name) for name in TORCH_DATA)
        watched: dict[str, tuple[object, str]] = {}
        for needs, path, label, names, optional in WATCHED:
            owner = _owner(path, shell) if uses[needs] else None
            for name in names if owner is not None else ():
                if not optional or hasattr(owner, name):
                    watched[label.format(name)] = (owner, name)
        lazy: dict[str, object] = {}
        if "course_utils" in modules:
            import course_utils
            import course_utils.checks as checks

            for name in dir(checks):
                if name.startswith(CHECKS):
                    watched[f"course_utils.checks.{name}"] = (checks, name)
                    if name in getattr(course_utils, "__all__", ()):
                        watched[f"course_utils.{name}"] = (course_utils, name)
                        lazy[f"course_utils.{name}"] = getattr(checks, name)
            module_names += COURSE_MODULES
            namespace.update({name: getattr(checks, name) for name in dir(checks) if name.startswith("check_")})
        self.plain = frozenset(plain)
        self.value_bases = tuple(value_bases)
        self.data = frozenset(data)
        self.denied = frozenset(id(getattr(builtins, name)) for name in DENIED if hasattr(builtins, name))
        self.watched = watched
        self.lazy = lazy
        self.module_names = module_names
        self.namespace = namespace
