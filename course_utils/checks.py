"""Assertion helpers for exercise tests: type and shape first, then value.

Contract: every check raises ``AssertionError`` with a message a learner can act on
("matmul_flops(2, 3, 4) should be an int, got str"). Type is checked exactly before any
comparison, so an object whose ``__eq__`` always returns True cannot pass. Values are
compared with functions bound when this module is imported, so a submission that later
patches ``torch.allclose`` or ``torch.testing.assert_close`` does not change the verdict.

``forbidden_calls`` enforces "write it yourself" bans: it fails if the code run inside it
calls a banned function, whichever name the function was reached by (an alias imported at
the top of a cell, a default argument, a closure), because it watches the calls themselves
instead of replacing attributes. First used in notebooks 05-07.
"""

from __future__ import annotations

import inspect
import math
import numbers
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.testing
from torch.overrides import TorchFunctionMode

__all__ = ["check_equal", "check_float", "check_int", "check_tensor", "check_type", "forbidden_calls"]

_assert_close = torch.testing.assert_close
_isclose = math.isclose


def check_type(value: object, expected: type | tuple[type, ...], name: str) -> None:
    """Fail unless ``value`` is an instance of ``expected``."""
    if not isinstance(value, expected):
        wanted = " or ".join(t.__name__ for t in expected) if isinstance(expected, tuple) else expected.__name__
        raise AssertionError(f"{name} should be {_article(wanted)} {wanted}, got {type(value).__name__}: {value!r:.80}")


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _true_int(value: numbers.Integral) -> int:
    """The integer ``value`` holds, without calling an ``int`` subclass's own ``__int__``."""
    return int.__int__(value) if isinstance(value, int) else int(value)


def _true_float(value: numbers.Real) -> float:
    """The number ``value`` holds, without calling a ``float``/``int`` subclass's own conversion."""
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, int):
        return float(int.__int__(value))
    return float(value)


def check_int(value: object, expected: int, name: str) -> None:
    """Fail unless ``value`` is an integer (not a bool or a float) equal to ``expected``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise AssertionError(f"{name} should be an int, got {type(value).__name__}: {value!r:.80}")
    actual = _true_int(value)
    if actual != expected:
        raise AssertionError(f"{name} should be {expected}, got {actual}")


def check_float(value: object, expected: float, name: str, *, rel_tol: float = 1e-6, abs_tol: float = 0.0) -> None:
    """Fail unless ``value`` is a real number within tolerance of ``expected``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise AssertionError(f"{name} should be a number, got {type(value).__name__}: {value!r:.80}")
    actual = _true_float(value)
    if not _isclose(actual, expected, rel_tol=rel_tol, abs_tol=abs_tol):
        raise AssertionError(f"{name} should be about {expected:.6g}, got {actual:.6g}")


def check_tensor(
    value: object,
    expected: torch.Tensor,
    name: str,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_device: bool = False,
) -> None:
    """Fail unless ``value`` is a tensor with ``expected``'s shape, dtype and values.

    Tolerances default to ``torch.testing.assert_close``'s for the dtype.
    """
    if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
        raise AssertionError(f"{name} should be a torch.Tensor, got {type(value).__name__}")
    assert isinstance(value, torch.Tensor)
    if value.shape != expected.shape:
        raise AssertionError(f"{name} should have shape {tuple(expected.shape)}, got {tuple(value.shape)}")
    if value.dtype != expected.dtype:
        raise AssertionError(f"{name} should have dtype {expected.dtype}, got {value.dtype}")
    if check_device and value.device != expected.device:
        raise AssertionError(f"{name} should be on {expected.device}, got {value.device}")
    actual, wanted = value.detach().cpu(), expected.detach().cpu()
    try:
        _assert_close(actual, wanted, rtol=rtol, atol=atol, check_device=False, msg=None)
    except AssertionError as error:
        detail = _one_line(error, actual, wanted)
        raise AssertionError(f"{name} has the right shape and dtype but wrong values: {detail}") from None


def _one_line(error: AssertionError, actual: torch.Tensor, expected: torch.Tensor) -> str:
    """``assert_close``'s report (which elements, how far, what is allowed) on one line, with the worst pair.

    A learner's Validate dialog and nbgrader's feedback show the first line of a message, and
    the report's first line alone ("Tensor-likes are not close!") says nothing.
    """
    lines = [line.strip().rstrip(".") for line in str(error).splitlines() if line.strip()]
    text = "; ".join(line for line in lines if not line.startswith(("Tensor-likes", "Scalars", "Expected")))
    if actual.dim() == 0:
        return f"got {actual.item():.6g}, expected {expected.item():.6g}" + (f" ({text})" if text else "")
    gap = (actual.double() - expected.double()).abs().nan_to_num(nan=float("inf"))
    worst = tuple(int(i) for i in torch.unravel_index(gap.argmax(), gap.shape))
    pair = f"at index {worst} got {actual[worst].item():.6g}, expected {expected[worst].item():.6g}"
    return f"{text}; {pair}" if text else pair


def _strictly_equal(value: object, expected: object) -> bool:
    """Equality that never calls a method of ``value``'s own (possibly hostile) class."""
    if type(value) is not type(expected):
        return False
    if isinstance(expected, (list, tuple)):
        assert isinstance(value, (list, tuple))
        return len(value) == len(expected) and all(map(_strictly_equal, value, expected))
    if isinstance(expected, dict):
        assert isinstance(value, dict)
        return _strictly_equal(sorted(value.items(), key=repr), sorted(expected.items(), key=repr))
    if isinstance(expected, (set, frozenset)):
        assert isinstance(value, (set, frozenset))
        return all(type(item) in _PLAIN for item in value) and value == expected
    return type(expected) in _PLAIN and value == expected


_PLAIN = (int, float, str, bool, bytes, type(None))


def check_equal(value: object, expected: object, name: str) -> None:
    """Fail unless ``value`` has ``expected``'s exact type and equals it, element by element.

    Works for plain values (int, str, ...) and lists, tuples, sets and dicts of them.
    """
    if type(value) is not type(expected):
        raise AssertionError(
            f"{name} should be {_article(type(expected).__name__)} {type(expected).__name__}, "
            f"got {type(value).__name__}: {value!r:.80}"
        )
    if not _strictly_equal(value, expected):
        raise AssertionError(f"{name} should be {expected!r}, got {value!r:.200}")


def _qualified_name(obj: object) -> str:
    if isinstance(obj, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return f"torch.ops.{obj}"  # str() is "aten.native_batch_norm" (".default" for an overload)
    module = getattr(obj, "__module__", None) or getattr(getattr(obj, "__objclass__", None), "__module__", "")
    name = getattr(obj, "__qualname__", "") or getattr(obj, "__name__", repr(obj))
    return f"{module}.{name}" if module else name


def _banned_targets(targets: tuple[object, ...]) -> tuple[dict[types.CodeType, str], dict[int, str]]:
    """Split ``targets`` into Python code objects and other callables (builtins, tensor methods).

    A module stands for every function and class defined in it, a class for every function
    in its body. A decorated function is unwrapped to the function it wraps: a decorator's
    wrapper code is often shared with unrelated functions.
    """
    codes: dict[types.CodeType, str] = {}
    others: dict[int, str] = {}

    def add(obj: object, name: str) -> None:
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if inspect.isfunction(obj):
            codes[inspect.unwrap(obj).__code__] = name
        elif callable(obj) and not isinstance(obj, type):
            others[id(obj)] = name
        else:
            raise TypeError(f"forbidden_calls() cannot watch {obj!r}")

    pending = list(targets)
    while pending:
        target = pending.pop()
        if isinstance(target, types.ModuleType):
            for member_name, member in vars(target).items():
                if getattr(member, "__module__", None) != target.__name__:
                    continue  # imported into the module, not defined there
                if inspect.isfunction(member):
                    add(member, f"{target.__name__}.{member_name}")
                elif inspect.isclass(member):
                    pending.append(member)
        elif inspect.isclass(target):
            for attr, member in vars(target).items():
                if inspect.isfunction(member) or isinstance(member, (staticmethod, classmethod)):
                    add(member, f"{_qualified_name(target)}.{attr}")
        else:
            add(target, _qualified_name(target))
    return codes, others


class _RecordTorchCalls(TorchFunctionMode):
    """Records banned torch functions and tensor methods (``Tensor.item``, ``Tensor.__bool__``)."""

    def __init__(self, banned: dict[int, str], seen: list[str]) -> None:
        super().__init__()
        self.banned, self.seen = banned, seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if id(func) in self.banned:
            self.seen.append(self.banned[id(func)])
        return func(*args, **(kwargs or {}))


@contextmanager
def forbidden_calls(*targets: object, reason: str) -> Iterator[None]:
    """Fail with ``reason`` if the block calls any of ``targets``, by whatever name.

    ``targets`` are functions, classes (any of their methods), modules (every function and
    class defined there), builtins such as ``torch.set_autocast_enabled``, and tensor
    methods such as ``torch.Tensor.item`` or ``torch.Tensor.__bool__`` (the last two are
    seen through a ``TorchFunctionMode``). Calls are only recorded while the block runs;
    the verdict comes when it ends, so a submission cannot catch it. The watch covers the
    current thread, and replaces any ``sys.setprofile`` hook for the duration of the block.

    >>> import torch.nn.init as init
    >>> from torch.nn.init import normal_ as draw
    >>> with forbidden_calls(init, reason="draw the samples yourself"):
    ...     weights = draw(torch.empty(3))
    Traceback (most recent call last):
    AssertionError: draw the samples yourself (the code called torch.nn.init.normal_)
    """
    codes, others = _banned_targets(targets)
    seen: list[str] = []

    def watch(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in codes:
            seen.append(codes[frame.f_code])
        elif event == "c_call" and id(arg) in others:
            seen.append(others[id(arg)])

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        if others:
            with _RecordTorchCalls(others, seen):
                yield
        else:
            yield
    finally:
        sys.setprofile(previous)
    if seen:
        public = [name for name in seen if not name.rsplit(".", 1)[-1].startswith("_") or name.endswith("__")]
        called = ", ".join(dict.fromkeys(public or seen))
        raise AssertionError(f"{reason} (the code called {called})")
