"""course_utils.checks: right answers pass, wrong and hostile ones fail with clear messages."""

import math
import sys

import pytest
import torch

from course_utils.checks import check_equal, check_float, check_int, check_tensor, check_type, forbidden_calls


class AlwaysEqual:
    """What a submission might return to fool ``==``."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


def test_check_int():
    check_int(48, 48, "x")
    with pytest.raises(AssertionError, match="should be 48, got 47"):
        check_int(47, 48, "x")
    with pytest.raises(AssertionError, match="should be an int, got float"):
        check_int(48.0, 48, "x")
    with pytest.raises(AssertionError, match="should be an int, got bool"):
        check_int(True, 1, "x")
    with pytest.raises(AssertionError, match="should be an int"):
        check_int(AlwaysEqual(), 48, "x")


def test_check_float():
    check_float(0.1 + 0.2, 0.3, "x")
    check_float(3, 3.0, "x")
    with pytest.raises(AssertionError, match=r"about 0\.3"):
        check_float(0.31, 0.3, "x")
    with pytest.raises(AssertionError, match="number"):
        check_float("0.3", 0.3, "x")


def test_check_type():
    check_type({1}, set, "s")
    check_type(1, (int, float), "n")
    with pytest.raises(AssertionError, match="should be a set, got list"):
        check_type([1], set, "s")
    with pytest.raises(AssertionError, match="int or float"):
        check_type("1", (int, float), "n")


def test_check_tensor_order_of_checks():
    expected = torch.ones(2, 3)
    check_tensor(torch.ones(2, 3), expected, "t")
    check_tensor(torch.nn.Parameter(torch.ones(2, 3)), expected, "t")
    with pytest.raises(AssertionError, match=r"should be a torch\.Tensor, got list"):
        check_tensor([[1.0] * 3] * 2, expected, "t")
    with pytest.raises(AssertionError, match=r"shape \(2, 3\), got \(3, 2\)"):
        check_tensor(torch.ones(3, 2), expected, "t")
    with pytest.raises(AssertionError, match=r"dtype torch\.float32, got torch\.float64"):
        check_tensor(torch.ones(2, 3, dtype=torch.float64), expected, "t")
    with pytest.raises(AssertionError, match="wrong values"):
        check_tensor(torch.zeros(2, 3), expected, "t")
    check_tensor(torch.ones(2, 3) + 1e-3, expected, "t", atol=1e-2, rtol=0)


def test_check_tensor_rejects_subclass_with_fake_eq():
    class Sneaky(torch.Tensor):
        def __eq__(self, other):
            return True

    with pytest.raises(AssertionError, match=r"torch\.Tensor"):
        check_tensor(torch.zeros(2).as_subclass(Sneaky), torch.ones(2), "t")


def test_checks_ignore_patched_comparisons(monkeypatch):
    monkeypatch.setattr(torch.testing, "assert_close", lambda *a, **k: None)
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    with pytest.raises(AssertionError, match="wrong values"):
        check_tensor(torch.zeros(2), torch.ones(2), "t")


def test_check_equal_containers():
    check_equal({4, 5, 7}, {4, 5, 7}, "s")
    check_equal(["fn", "sync"], ["fn", "sync"], "events")
    check_equal({"a": [1, 2]}, {"a": [1, 2]}, "d")
    with pytest.raises(AssertionError, match="should be a set, got list"):
        check_equal([4, 5], {4, 5}, "s")
    with pytest.raises(AssertionError, match="should be"):
        check_equal({4, 5}, {4, 5, 7}, "s")
    with pytest.raises(AssertionError):
        check_equal(["fn", "clock"], ["fn", "sync"], "events")


def test_check_equal_rejects_hostile_elements():
    with pytest.raises(AssertionError):
        check_equal(AlwaysEqual(), "cuda", "x")
    with pytest.raises(AssertionError):
        check_equal([AlwaysEqual(), AlwaysEqual()], ["fn", "sync"], "events")
    with pytest.raises(AssertionError):
        check_equal({AlwaysEqual()}, {1}, "s")


def _learner_code(source: str) -> dict:
    """Run ``source`` as a notebook cell would: its own namespace, its own top-level imports."""
    namespace: dict = {}
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


def _fails_under_ban(fn, *targets, match: str) -> None:
    with pytest.raises(AssertionError, match=match), forbidden_calls(*targets, reason="write it yourself"):
        fn()


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ndef answer(t):\n    return torch.nn.init.normal_(t)",
        "from torch.nn.init import normal_\ndef answer(t):\n    return normal_(t)",
        "from torch.nn.init import normal_ as draw\ndef answer(t, _draw=draw):\n    return _draw(t)",
        "import torch.nn.init as I\ndef answer(t):\n    return getattr(I, 'kaiming_normal_')(t)",
    ],
    ids=["attribute", "top-level import", "default argument", "getattr"],
)
def test_forbidden_calls_catches_every_alias_of_a_banned_module(source):
    answer = _learner_code(source)["answer"]
    expected = r"write it yourself \(the code called torch\.nn\.init\.\w+_[,)]"
    _fails_under_ban(lambda: answer(torch.empty(4, 4)), torch.nn.init, match=expected)


def test_forbidden_calls_lets_other_code_through():
    answer = _learner_code("import torch\ndef answer(t, g):\n    return t.normal_(generator=g)")["answer"]
    with forbidden_calls(torch.nn.init, reason="write it yourself"):
        result = answer(torch.empty(3), torch.Generator().manual_seed(0))
    assert result.shape == (3,)


def test_forbidden_calls_unwraps_decorators_without_banning_their_wrapper():
    # clip_grad_norm_ and clip_grad_value_ share the code of their `_no_grad` wrapper: banning
    # one must not ban the other.
    from torch.nn.utils import clip_grad_norm_, clip_grad_value_

    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 10.0)
    with forbidden_calls(torch.nn.utils.clip_grad_norm_, reason="write it yourself"):
        clip_grad_value_([p], 1.0)
    _fails_under_ban(lambda: clip_grad_norm_([p], 1.0), torch.nn.utils.clip_grad_norm_, match="clip_grad_norm_")


def test_forbidden_calls_watches_classes_builtins_and_tensor_methods():
    source = "from torch import autocast\ndef answer():\n    with autocast('cpu'):\n        pass"
    _fails_under_ban(_learner_code(source)["answer"], torch.autocast, match="autocast")
    _fails_under_ban(lambda: math.sqrt(2.0), math.sqrt, match="sqrt")
    t = torch.tensor(2.0)
    host_reads = (torch.Tensor.__bool__, torch.Tensor.item)
    _fails_under_ban(lambda: "big" if t > 1 else "small", *host_reads, match="__bool__")
    _fails_under_ban(t.item, *host_reads, match="item")
    with forbidden_calls(*host_reads, reason="no host reads"):
        torch.clamp(1.0 / (t + 1e-6), max=1.0)


def test_forbidden_calls_restores_the_profiler_and_lets_errors_through():
    def earlier(frame, event, arg):
        return None

    sys.setprofile(earlier)
    try:
        with pytest.raises(ZeroDivisionError), forbidden_calls(torch.nn.init, reason="write it yourself"):
            1 / 0  # noqa: B018
        assert sys.getprofile() is earlier
    finally:
        sys.setprofile(None)
    with pytest.raises(TypeError, match="cannot watch"), forbidden_calls(42, reason="write it yourself"):
        pass


def test_check_tensor_says_on_one_line_which_values_differ():
    """Validate and the feedback show a message's first line: it must say what differs."""
    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 0.5
    with pytest.raises(AssertionError) as caught:
        check_tensor(actual, expected, "t")
    (line,) = str(caught.value).splitlines()
    assert "Mismatched elements: 1 / 6" in line and "at index (1, 2) got 0.5, expected 0" in line
    with pytest.raises(AssertionError, match=r"^t has .* got 1, expected 2 \(Absolute difference: 1.0"):
        check_tensor(torch.tensor(1.0), torch.tensor(2.0), "t")


def test_a_banned_aten_operator_is_named_as_a_learner_would_call_it():
    called = r"\(the code called torch\.ops\.aten\.native_batch_norm\)"
    aten = torch.ops.aten.native_batch_norm
    with pytest.raises(AssertionError, match=called), forbidden_calls(aten, reason="write it yourself"):
        aten(torch.randn(4, 3), None, None, None, None, True, 0.1, 1e-5)
