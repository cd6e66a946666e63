"""Which code counts as installed (trusted): the interpreter's and the environment's files, and this course's.

Contract: ``_trusted_roots()`` and ``_course_roots()`` are folder prefixes (each ending in the
path separator) read from ``sys`` and the loaded ``course_utils``/``grading`` packages;
``_installed_file`` answers whether a file lies under them (``cache``: a dict the caller keeps);
``_trusted`` whether a callable or object comes from such code; ``_genuine`` what code the kernel
holds before the notebook's first cell (by identity, which a submission cannot forge, unlike a
file name). Nothing here runs at import time beyond defining these.
"""

from __future__ import annotations

import os
import sys
import types

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time (class statement, type()), not C's static one


def _trusted_roots() -> tuple[str, ...]:
    """The interpreter's, the environment's and the course's folders (never ``/`` alone)."""
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


def _installed_file(filename: object, roots: tuple[str, ...], cache: dict[str, bool] | None = None) -> bool:
    """Whether ``filename`` (a code object's, a module's) is a file under ``roots``, symbolic links resolved."""
    if not isinstance(filename, str):
        return False
    if cache is not None and filename in cache:
        return cache[filename]
    found = os.path.realpath(filename).startswith(roots)
    if cache is not None:
        cache[filename] = found
    return found


def _code_files(value: object) -> list[str]:
    """The source files of the Python code behind ``value`` (a function, property, classmethod, ...)."""
    files = []
    for item in (value, getattr(value, "__func__", None), getattr(value, "fget", None), getattr(value, "func", None)):
        code = getattr(item, "__code__", None)
        if isinstance(code, types.CodeType):
            files.append(code.co_filename)
    return files


def _trusted(value: object, roots: tuple[str, ...], cache: dict[str, bool] | None = None) -> bool:
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
    return all(
        _installed_file(f, roots, cache) for klass in cls.__mro__ for v in vars(klass).values() for f in _code_files(v)
    )


def _defined_in_installed_code(cls: type, roots: tuple[str, ...], cache: dict[str, bool]) -> bool:
    """Whether the module that defines ``cls`` is the interpreter's or an installed file (not ``__main__``)."""
    name = getattr(cls, "__module__", "") or ""
    if name in sys.builtin_module_names:
        return True
    return name != "__main__" and _installed_file(getattr(sys.modules.get(name), "__file__", None), roots, cache)


def _genuine() -> tuple[frozenset[tuple[int, int]], frozenset[int], tuple[object, ...]]:
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
