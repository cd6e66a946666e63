"""course_utils.checks: right answers pass, wrong and hostile ones fail with clear messages."""

import pytest
import torch

from course_utils.checks import check_equal, check_float, check_int, check_tensor, check_type


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
