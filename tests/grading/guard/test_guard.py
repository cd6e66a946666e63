"""Objects that lie earn no points, even against an instructor's plain ``assert torch.allclose(...)``.

One notebook runs in one jailed grading kernel: answers that return a tensor subclass whose
``__torch_function__`` makes ``allclose``/``equal``/``item`` pass, a Python ``__eq__`` that
always holds, a ``float`` whose comparisons lie, a tensor subclass with a lying ``shape``,
next to honest answers (plain tensors, ``nn.Parameter``, a class of the learner's own
compared with another of its kind) that must still pass, also after libraries hooked into
the kernel (matplotlib's inline backend, ``torch.set_default_device``). Then a
``TorchFunctionMode`` and an event callback of the submission's own are caught by the guard
and every later test fails.

A second kernel (no torch) checks what the code under test can read of a hidden test while
it runs and after it (the test's variables through ``globals()``, ``In``, ``linecache``, the
kernel's request, IPython's record of the cell: nothing of its hidden lines), that a test's
value is still nbgrader's partial credit (unless it ends in ``;``) and its variables are left
in the namespace, and that replacing the code of the guard's own functions is refused. The guard
is a package of several modules: each is named for the audit hook, and rebinding a function of
one, swapping one in ``sys.modules`` or in the package fails every later test.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grading.sandbox.protections import Limits, detect
from grading.sandbox.workers import WorkerPool
from grading.sanitize import with_grader_cells, without_grader_cells

# Real kernels, servers or processes for seconds: `make test` runs this file, `make test-fast` does not.
pytestmark = pytest.mark.slow

ANSWERS = """
import torch


class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal", "isclose"):
            return True
        if name == "item":
            return 2.0
        return super().__torch_function__(func, types, args, kwargs or {})


class WideShape(torch.Tensor):
    @property
    def shape(self):
        return torch.Size([16, 3])


class Anything:
    def __eq__(self, other):
        return True


class FloatLiar(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class Fraction:
    def __init__(self, top, bottom):
        self.top, self.bottom = top, bottom

    def __eq__(self, other):
        return isinstance(other, Fraction) and self.top * other.bottom == other.top * self.bottom


def lying_tensor(x):
    return torch.zeros_like(x).as_subclass(Agreeable)


def lying_shape(x):
    return torch.zeros(1).as_subclass(WideShape)


def honest(x):
    return 2 * x


# libraries may hook into the kernel legitimately: that is no tampering
import matplotlib_inline.backend_inline

get_ipython().events.register("post_execute", matplotlib_inline.backend_inline.flush_figures)
torch.set_default_device("cpu")  # leaves torch's DeviceContext function mode active
"""

TESTS = {
    "allclose_vs_torch_function": "x = torch.ones(4)\nassert torch.allclose(lying_tensor(x), 2 * x)",
    "equal_vs_torch_function": "x = torch.ones(4)\nassert torch.equal(lying_tensor(x), 2 * x)",
    "item_vs_torch_function": "assert lying_tensor(torch.ones(1)).item() == 2.0",
    "shape_vs_property": "assert lying_shape(torch.ones(1)).shape == (16, 3)",
    "eq_always_true": "assert Anything() == 48",
    "float_subclass": "assert FloatLiar(0.0) == 2.0",
    "honest_tensor": "x = torch.ones(4)\nassert torch.allclose(honest(x), 2 * x) and honest(x).shape == (4,)",
    "honest_parameter": "p = torch.nn.Parameter(torch.ones(2))\nassert torch.equal(p.detach(), torch.ones(2))",
    "own_class_vs_own_class": "assert Fraction(1, 2) == Fraction(2, 4)",
    "mode_left_active": "assert torch.allclose(honest(torch.ones(2)), torch.full((2,), 2.0))",
    "after_the_mode": "assert True",
}
LIARS = {"allclose_vs_torch_function", "equal_vs_torch_function", "item_vs_torch_function", "shape_vs_property"}
LIARS |= {"eq_always_true", "float_subclass"}
MODE = """
from torch.overrides import TorchFunctionMode


class AlwaysClose(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "allclose":
            return True
        return func(*args, **(kwargs or {}))


AlwaysClose().__enter__()


def _after_each_cell():  # the submission's own code around each cell
    pass


get_ipython().events.register("post_run_cell", _after_each_cell)
"""


def _meta(grade_id: str) -> dict:
    flags = {"grade": True, "grade_id": grade_id, "locked": True, "points": 1, "schema_version": 3}
    return {"nbgrader": {**flags, "solution": False, "task": False}}


@pytest.fixture(scope="module")
def executed():
    cells = [new_code_cell(ANSWERS)]
    for name, source in TESTS.items():
        if name == "mode_left_active":
            cells.append(new_code_cell(MODE))
        cells.append(new_code_cell(source, metadata=_meta(name)))
    job = {"nb": with_grader_cells(new_notebook(cells=cells)), "files": None}
    [(_, result)] = list(WorkerPool(1, detect(), Limits(cell_timeout=60), []).run([("nb", job)]))
    assert "nb" in result, result
    nb = without_grader_cells(nbformat.from_dict(result["nb"]), [])
    errors = {}
    for cell in nb.cells:
        name = cell.metadata.get("nbgrader", {}).get("grade_id")
        if name:
            error = next((o for o in cell.outputs if o["output_type"] == "error"), None)
            errors[name] = (error["ename"], error["evalue"]) if error else None
    return errors, result["notes"]


@pytest.mark.parametrize("name", sorted(LIARS))
def test_objects_that_lie_fail_and_the_notes_say_what(executed, name):
    errors, notes = executed
    assert errors[name] is not None and errors[name][0] == "GradingIntegrityError", errors[name]
    assert any(note.startswith(f"`{name}`: the test received") for note in notes), notes


def test_what_was_detected_is_named(executed):
    errors, _ = executed
    assert (
        "a torch.Tensor subclass defined in the submission that redefines __torch_function__"
        in errors["allclose_vs_torch_function"][1]
    )
    assert "redefines shape" in errors["shape_vs_property"][1]
    assert "defines its own __eq__" in errors["eq_always_true"][1]
    assert "a subclass of float" in errors["float_subclass"][1]


@pytest.mark.parametrize("name", ["honest_tensor", "honest_parameter", "own_class_vs_own_class"])
def test_honest_answers_still_pass(executed, name):
    errors, _ = executed
    assert errors[name] is None, errors[name]


def test_a_torch_function_mode_or_a_callback_of_the_submissions_fails_every_later_test(executed):
    errors, notes = executed
    assert errors["mode_left_active"][0] == errors["after_the_mode"][0] == "GradingIntegrityError"
    note = next(note for note in notes if note.startswith("Before `mode_left_active`"))
    assert "TorchFunctionMode" in note and "IPython event callbacks" in note


FAKE_GUARD = '''
import hashlib, hmac, os

_token = None


def install(shell, modules):
    global _token
    with open(".course-grading-token") as f:  # the secret the real guard would have read
        _token = f.read()
    os.remove(".course-grading-token")


def check(index=0):  # never finds anything, and answers the grader as the real guard would
    return hmac.new(_token.encode(), str(index).encode(), hashlib.sha256).hexdigest()[:32]
'''


def test_a_grader_package_shipped_with_the_submission_is_not_imported_in_place_of_the_real_one(tmp_path):
    """The submission's files sit in the kernel's working directory, first on ``sys.path``."""
    (tmp_path / "grading" / "guard").mkdir(parents=True)  # laid out as the real one: a package
    (tmp_path / "grading" / "__init__.py").write_text("")
    (tmp_path / "grading" / "guard" / "__init__.py").write_text(FAKE_GUARD)
    cheat = "import torch\ntorch.allclose = lambda *args, **kwargs: True"
    test = "import torch\nassert torch.allclose(torch.zeros(1), torch.ones(1))"
    cells = [new_code_cell(cheat), new_code_cell(test, metadata=_meta("patched_allclose"))]
    job = {"nb": with_grader_cells(new_notebook(cells=cells)), "files": str(tmp_path)}
    [(_, result)] = list(WorkerPool(1, detect(), Limits(cell_timeout=60), []).run([("nb", job)]))
    nb = without_grader_cells(nbformat.from_dict(result["nb"]), [])
    error = next(o for o in nb.cells[1].outputs if o["output_type"] == "error")
    assert error["ename"] == "GradingIntegrityError" and "torch.allclose" in error["evalue"], error


# ---------------------------------------------------------------------------------------
# what the code under test can read of a test, and what the test keeps (one kernel, no torch)

PEEK = """
import linecache

SEEN = []
MARK = "SECRET" + "-"  # what the hidden lines hold (not written here, so that this cell does not match)


def answer(x):
    shell = get_ipython()
    SEEN.append(sorted(name for name in globals() if name in ("expected", "helper")))  # the test's variables
    SEEN.append([cell for cell in In if MARK in cell])
    SEEN.append([line for entry in list(linecache.cache.values()) for line in entry[2] if MARK in line])
    SEEN.append(shell.kernel.get_parent("shell")["content"]["code"])  # the request being run
    SEEN.append(shell.displayhook.exec_result.info.raw_cell)  # IPython's record of it
    return 2 * x
"""
HIDDEN_TEST = """answer(1)
### BEGIN HIDDEN TESTS
expected = 4  # SECRET-1


def helper(value):  # SECRET-2
    return value


assert helper(answer(2)) == expected, "answer(2) should be 4"
### END HIDDEN TESTS"""
SHOW = "print(SEEN, In, _ih, Out, _oh, [v for k, v in globals().items() if k.startswith('_i')])"
SWAP = 'import grading.guard\ngrading.guard.check.__code__ = (lambda *args: "0" * 32).__code__'


@pytest.fixture(scope="module")
def peeked():
    hidden = {"course_grading": {"hidden_lines": list(range(1, 11))}}
    cells = [
        new_code_cell(PEEK),
        new_code_cell(HIDDEN_TEST, metadata=_meta("hidden") | hidden),
        new_code_cell("0.5", metadata=_meta("partial")),
        new_code_cell("0.5;", metadata=_meta("partial_with_semicolon")),
        new_code_cell("assert expected == 4 and helper(3) == 3", metadata=_meta("exported")),
        new_code_cell(SHOW),
        new_code_cell(SWAP),
        new_code_cell("assert True", metadata=_meta("after_the_swap")),
    ]
    job = {"nb": with_grader_cells(new_notebook(cells=cells)), "files": None}
    [(_, result)] = list(WorkerPool(1, detect(), Limits(cell_timeout=60), []).run([("nb", job)]))
    assert "nb" in result, result
    return without_grader_cells(nbformat.from_dict(result["nb"]), []), result["notes"]


def _outputs(cell) -> str:
    return json.dumps(cell.outputs)


def test_the_code_under_test_reads_nothing_of_a_hidden_test(peeked):
    nb, _ = peeked
    assert not any(o["output_type"] == "error" for o in nb.cells[1].outputs), nb.cells[1].outputs
    shown = _outputs(nb.cells[5])
    assert shown.count("[], [], [], 'answer(1)") == 2, shown  # no `expected`, nothing in In or linecache
    assert "SECRET-" not in shown and "answer(2) should be 4" not in shown, shown


def test_a_tests_value_is_partial_credit_unless_it_ends_in_a_semicolon(peeked):
    nb, _ = peeked
    results = [o for o in nb.cells[2].outputs if o["output_type"] == "execute_result"]
    assert [r["data"]["text/plain"] for r in results] == ["0.5"]
    assert not [o for o in nb.cells[3].outputs if o["output_type"] == "execute_result"]


def test_a_tests_variables_are_left_in_the_namespace_once_it_ends(peeked):
    nb, _ = peeked
    assert not any(o["output_type"] == "error" for o in nb.cells[4].outputs), nb.cells[4].outputs


def test_replacing_the_code_of_the_grader_itself_is_refused(peeked):
    nb, notes = peeked
    assert "refused" in _outputs(nb.cells[6])
    error = next(o for o in nb.cells[7].outputs if o["output_type"] == "error")
    assert "tried to replace the __code__ of the grader's check" in error["evalue"], error
    assert any(note.startswith("Before `after_the_swap`") for note in notes), notes


# ---------------------------------------------------------------------------------------
# a test cell keeps the meaning Python gives it (one kernel, no torch), compared with plain IPython

MODULE_SEMANTICS = [
    (None, "def squares(n):\n    return [i * i for i in range(1, n + 1)]\n\n\ndef sum_of_squares(n):\n"
           "    return sum(squares(n))\n\n\ncount, x, expected = 0, 1, 'the notebook\\'s'\n\n\n"
           "def peek():\n    return expected"),
    ("uses_squares", "orig = squares\ndel squares\ntry:\n    sum_of_squares(1)\nexcept NameError:\n    pass\nelse:\n"
                     "    raise AssertionError('sum_of_squares does not use squares')\nfinally:\n    squares = orig\n"
                     "assert sum_of_squares(3) == 14\n0.5"),
    (None, "print(squares(2), orig is squares)"),
    ("global_statements", "global count\ncount = 5\n\n\ndef bump():\n    global x\n    x = 2\n\n\nbump()\ny = 7\n"
                          "assert (count, x) == (5, 2)\ncount"),
    (None, "print(count, x, y)"),
    ("augmented_and_deleted", "count += 1\nz = 3\ndel z\nassert count == 6\ncount / 12"),
    (None, "print(count, 'z' in globals())"),
    ("rebound_for_the_code_under_test", "saved = squares\nsquares = lambda n: [0] * n\nresult = sum_of_squares(3)\n"
                                        "squares = saved\nresult"),
    (None, "print(result, saved is squares)"),
    ("own_variable", "expected = 'the test\\'s'\nseen = peek()\nseen"),
    (None, "print(expected, seen)"),
]


def _shown(outputs: list) -> list[str]:
    """What a cell printed and displayed, as text."""
    shown = []
    for output in outputs:
        if output["output_type"] == "stream":
            shown.append(output["text"])
        elif output["output_type"] == "execute_result":
            shown.append(output["data"]["text/plain"] + "\n")
        elif output["output_type"] == "error":
            shown.append(f"{output['ename']}: {output['evalue']}\n")
    return shown


def _plain_ipython(sources: list[str]) -> list[list[str]]:
    """The same cells in a plain IPython shell, in this process (no grader): what each printed and displayed."""
    import contextlib
    import io

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell()
    shown = []
    for source in sources:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            result = shell.run_cell(source, store_history=False)
        text = "".join(line for line in printed.getvalue().splitlines(True) if not line.startswith("Out["))
        cell = [text] if text else []  # the value itself from the result, as the kernel sends it
        if result.error_in_exec is not None:
            cell.append(f"{type(result.error_in_exec).__name__}: {result.error_in_exec}\n")
        elif result.result is not None:
            cell.append(repr(result.result) + "\n")
        shown.append(cell)
    return shown


@pytest.fixture(scope="module")
def module_semantics():
    cells = [new_code_cell(source, metadata=_meta(name) if name else {}) for name, source in MODULE_SEMANTICS]
    job = {"nb": with_grader_cells(new_notebook(cells=cells)), "files": None}
    [(_, result)] = list(WorkerPool(1, detect(), Limits(cell_timeout=60), []).run([("nb", job)]))
    assert "nb" in result, result
    nb = without_grader_cells(nbformat.from_dict(result["nb"]), [])
    return [_shown(cell.outputs) for cell in nb.cells if cell.cell_type == "code"], result["notes"]


def test_test_cells_keep_module_semantics_del_global_and_their_value(module_semantics):
    """``del`` and ``global`` act on the notebook, names stay for later cells, the value is partial credit."""
    guarded, notes = module_semantics
    plain = _plain_ipython([source for _, source in MODULE_SEMANTICS])
    assert guarded[:9] == plain[:9], (guarded, plain, notes)
    assert plain[1] == ["0.5\n"] and plain[3] == ["5\n"] and plain[7] == ["0\n"]  # what plain Python gives


def test_a_variable_the_test_binds_first_stays_its_own_while_it_runs(module_semantics):
    """The one deliberate difference: code under test reads the notebook's ``expected``, not the test's."""
    guarded, _ = module_semantics
    plain = _plain_ipython([source for _, source in MODULE_SEMANTICS])
    assert plain[9] == ['"the test\'s"\n'] and guarded[9] == ['"the notebook\'s"\n'], guarded[9]
    assert plain[10] == ["the test's the test's\n"]
    assert guarded[10] == ["the test's the notebook's\n"], guarded[10]  # `expected` left in the namespace at the end


# ---------------------------------------------------------------------------------------
# the guard is a package: every module of it is loaded before the notebook and compared


def test_every_module_of_the_guard_is_named_for_the_audit_hook():
    """The kernel loads each file of ``grading/guard/`` with the package, and the hook compares each one."""
    import sys
    from pathlib import Path

    import grading.guard

    folder = Path(grading.guard.__file__).parent
    found = {"grading.guard" if p.stem == "__init__" else f"grading.guard.{p.stem}" for p in folder.glob("*.py")}
    assert found == set(grading.guard.MODULES)
    assert all(name in sys.modules for name in grading.guard.MODULES)  # imported with the package, not later


SWAPS = {  # what a cell does to one of the guard's modules -> what the next test's verdict names
    "import grading.guard.recheck\n\ngrading.guard.recheck._changed = lambda *args: []": "the grader's _changed",
    "import sys, types\n\nsys.modules['grading.guard.lying'] = types.ModuleType('grading.guard.lying')":
        "sys.modules['grading.guard.lying']",
    "import grading.guard\n\ngrading.guard.state = grading.guard.trust": "the grader's state",
}  # fmt: skip


def test_rebinding_or_swapping_one_of_the_guards_modules_fails_every_later_test():
    jobs = []
    for number, swap in enumerate(SWAPS):
        cells = [
            new_code_cell("assert True", metadata=_meta("before")),
            new_code_cell(swap),
            new_code_cell("assert True", metadata=_meta("after_the_swap")),
        ]
        jobs.append((str(number), {"nb": with_grader_cells(new_notebook(cells=cells)), "files": None}))
    results = dict(WorkerPool(1, detect(), Limits(cell_timeout=60), []).run(jobs))
    for number, (swap, named) in enumerate(SWAPS.items()):
        result = results[str(number)]
        nb = without_grader_cells(nbformat.from_dict(result["nb"]), [])
        assert not any(o["output_type"] == "error" for o in nb.cells[0].outputs), (swap, nb.cells[0].outputs)
        error = next(o for o in nb.cells[2].outputs if o["output_type"] == "error")
        assert error["ename"] == "GradingIntegrityError" and named in error["evalue"], (swap, error)
        assert any(note.startswith("Before `after_the_swap`") for note in result["notes"]), result["notes"]


def test_the_comparisons_a_test_makes_are_c_code_in_a_read_only_table():
    """Python functions there could have their ``__code__`` swapped unseen (the guard once held lambdas)."""
    import types

    from grading.guard.lying import _OPERATORS

    assert all(isinstance(function, types.BuiltinFunctionType) for function in _OPERATORS.values())
    with pytest.raises(TypeError):
        _OPERATORS["Eq"] = lambda a, b: True  # type: ignore[index]  # what a submission would try


# ---------------------------------------------------------------------------------------
# a name the guard expects to be absent (an instance attribute that would shadow the class's method)


def test_switching_off_ipythons_tracebacks_fails_every_later_test_and_is_named():
    """``shell.showtraceback`` lives on IPython's class: the record that the shell instance has none of its own
    expects an absent name, and must be compared like any other (a wrong answer would otherwise show no error)."""
    cells = [
        new_code_cell("assert True", metadata=_meta("before")),
        new_code_cell("get_ipython().showtraceback = lambda *a, **k: None"),
        new_code_cell("assert 1 == 2", metadata=_meta("after_the_switch")),
    ]
    job = {"nb": with_grader_cells(new_notebook(cells=cells)), "files": None}
    [(_, result)] = list(WorkerPool(1, detect(), Limits(cell_timeout=60), []).run([("nb", job)]))
    assert "nb" in result, result
    nb = without_grader_cells(nbformat.from_dict(result["nb"]), [])
    assert not any(o["output_type"] == "error" for o in nb.cells[0].outputs), nb.cells[0].outputs
    error = next(o for o in nb.cells[2].outputs if o["output_type"] == "error")
    assert error["ename"] == "GradingIntegrityError" and "IPython shell.showtraceback" in error["evalue"], error
    notes = result["notes"]
    assert any(note.startswith("Before `after_the_switch`") and "showtraceback" in note for note in notes), notes
