"""The grader's own cells: a preamble that records the real comparison functions, and a guard
that runs before every test cell and fails it if the submission replaced any of them.

Contract: ``PREAMBLE`` runs first in every grading kernel, before any learner code. It
imports torch, numpy, math and ``course_utils.checks`` and records the objects the tests
rely on: comparison functions (``torch.allclose``, ``torch.testing.assert_close``,
numpy's ``allclose``/``testing`` asserts, ``math.isclose``), the check helpers and the
references they bound at import, a few builtins, the modules in ``sys.modules`` and
IPython's error reporting. ``GUARD`` compares them again; if anything was replaced it
raises ``GradingIntegrityError`` naming what changed, and the grader scores that test cell
(and, since the change persists, every later one) 0 without running it.

This is a tripwire for the comparison-patching attacks a learner might try, not a proof:
code that runs in the same interpreter can in principle also reach the snapshot. The
README's threat model says so.
"""

from __future__ import annotations

__all__ = ["GUARD", "PREAMBLE", "ROLE_KEY"]

ROLE_KEY = "course_grading"

PREAMBLE = r"""
def _course_grading_install():
    import builtins
    import math
    import sys
    import types

    import numpy
    import numpy.testing
    import torch
    import torch.testing

    import course_utils
    import course_utils.checks as checks

    shell = get_ipython()  # noqa: F821
    kernel = getattr(shell, "kernel", None)
    watched = {
        "torch.allclose": (torch, "allclose"),
        "torch.equal": (torch, "equal"),
        "torch.isclose": (torch, "isclose"),
        "torch.testing.assert_close": (torch.testing, "assert_close"),
        "torch.Tensor.__eq__": (torch.Tensor, "__eq__"),
        "torch.Tensor.allclose": (torch.Tensor, "allclose"),
        "torch.Tensor.equal": (torch.Tensor, "equal"),
        "numpy.allclose": (numpy, "allclose"),
        "numpy.isclose": (numpy, "isclose"),
        "numpy.array_equal": (numpy, "array_equal"),
        "numpy.testing.assert_allclose": (numpy.testing, "assert_allclose"),
        "numpy.testing.assert_array_equal": (numpy.testing, "assert_array_equal"),
        "numpy.testing.assert_equal": (numpy.testing, "assert_equal"),
        "math.isclose": (math, "isclose"),
    }
    for name in ("isinstance", "type", "len", "abs", "float", "int", "AssertionError", "__import__"):
        watched[f"builtins.{name}"] = (builtins, name)
    for name in dir(checks):
        if name.startswith(("check_", "_assert_close", "_isclose", "_strictly_equal", "_PLAIN")):
            watched[f"course_utils.checks.{name}"] = (checks, name)
            if hasattr(course_utils, name):
                watched[f"course_utils.{name}"] = (course_utils, name)
    for name in ("showtraceback", "run_cell", "run_code", "run_ast_nodes"):
        watched[f"IPython shell.{name}"] = (shell, name)
    if kernel is not None:
        watched["ipykernel do_execute"] = (kernel, "do_execute")
    original = {key: getattr(owner, attr) for key, (owner, attr) in watched.items()}
    modules = {name: sys.modules[name] for name in ("torch", "torch.testing", "numpy", "numpy.testing",
                                                     "math", "builtins", "course_utils", "course_utils.checks")}
    namespace = {"torch": torch, "np": numpy, "numpy": numpy, "math": math}
    namespace.update({name: getattr(checks, name) for name in dir(checks) if name.startswith("check_")})

    class GradingIntegrityError(Exception):
        pass

    def _same(a, b):
        return a is b or (getattr(a, "__func__", None) is not None and a.__func__ is getattr(b, "__func__", None))

    def check():
        changed = [key for key, (owner, attr) in watched.items()
                   if not _same(getattr(owner, attr, None), original[key])]
        changed += [f"sys.modules[{name!r}]" for name, module in modules.items()
                    if sys.modules.get(name) is not module]
        user = shell.user_ns
        changed += [f"the name {name!r}" for name, value in namespace.items()
                    if name in user and user[name] is not value]
        if getattr(shell, "custom_exceptions", ()) != ():
            changed.append("IPython custom exception handler (set_custom_exc)")
        if changed:
            raise GradingIntegrityError(
                "the submission replaced " + ", ".join(changed) + ": the tests cannot be trusted from here on, "
                "so this and every later test scores 0"
            )

    module = types.ModuleType("_course_grading_guard")
    module.check = check
    sys.modules["_course_grading_guard"] = module


_course_grading_install()
del _course_grading_install
"""

GUARD = '__import__("_course_grading_guard").check()'
