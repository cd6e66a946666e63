"""course_utils.training: the loop learns, logs every step, and clips when asked."""

import math

import pytest
import torch

from course_utils.data import load_digits_split
from course_utils.models import MLP
from course_utils.training import History, accuracy, train_classifier


@pytest.fixture(scope="module")
def digits():
    return load_digits_split(seed=0)


def test_training_learns_digits(digits):
    torch.manual_seed(0)
    model = MLP(64, 10, hidden=64, depth=1)
    history = train_classifier(model, digits.X_train, digits.y_train, epochs=3, batch_size=64, lr=0.1)
    steps = 3 * math.ceil(len(digits.y_train) / 64)
    assert len(history.losses) == len(history.grad_norms) == steps
    assert sum(history.losses[-10:]) / 10 < 0.5 * sum(history.losses[:10]) / 10
    assert accuracy(model, digits.X_test, digits.y_test) > 0.85
    assert model.training  # accuracy() restores the mode


def test_training_is_reproducible(digits):
    def run():
        torch.manual_seed(0)
        return train_classifier(MLP(64, 10, hidden=16, depth=1), digits.X_train, digits.y_train, epochs=1).losses

    assert run() == run()


def test_clip_norm_records_norm_before_clipping(digits):
    torch.manual_seed(0)
    plain = train_classifier(MLP(64, 10, depth=1), digits.X_train[:64], digits.y_train[:64], epochs=1, batch_size=64)
    torch.manual_seed(0)
    model = MLP(64, 10, depth=1)
    clipped = train_classifier(model, digits.X_train[:64], digits.y_train[:64], epochs=1, batch_size=64, clip_norm=1e-3)
    # Same first step before any update: same loss and same (unclipped) norm.
    assert clipped.losses[0] == pytest.approx(plain.losses[0])
    assert clipped.grad_norms[0] == pytest.approx(plain.grad_norms[0], rel=1e-5)
    assert clipped.grad_norms[0] > 1e-3


def test_diverging_run_stops_early():
    X = torch.randn(256, 8) * 1e6
    y = torch.randint(0, 2, (256,))
    torch.manual_seed(0)
    history = train_classifier(MLP(8, 2, depth=2), X, y, epochs=50, batch_size=32, lr=1e6)
    assert history.diverged
    assert len(history.losses) < 50 * 8
    # The history ends at the first non-finite loss, even though the epoch ran to its end.
    assert not math.isfinite(history.losses[-1])
    assert all(math.isfinite(loss) for loss in history.losses[:-1])
    assert len(history.grad_norms) == len(history.losses)


def test_history_diverged_flag():
    assert not History([1.0, 0.5]).diverged
    assert History([1.0, float("nan")]).diverged


def test_unknown_optimizer(digits):
    with pytest.raises(ValueError, match="optimizer"):
        train_classifier(MLP(64, 10), digits.X_train, digits.y_train, optimizer="lbfgs")


def test_accuracy_of_a_model_without_parameters():
    X = torch.tensor([[2.0, 1.0], [0.0, 3.0], [5.0, 4.0]])
    assert accuracy(torch.nn.Identity(), X, torch.tensor([0, 1, 1])) == pytest.approx(2 / 3)


def test_training_reads_values_back_once_per_epoch(digits, monkeypatch):
    """No .item() per step: the losses and norms come back in one .tolist() per epoch."""
    reads = []
    original_tolist = torch.Tensor.tolist

    def counting_tolist(tensor):
        reads.append(tensor.shape)
        return original_tolist(tensor)

    def no_item(tensor):
        raise AssertionError("train_classifier read a value with .item()")

    monkeypatch.setattr(torch.Tensor, "item", no_item)
    monkeypatch.setattr(torch.Tensor, "tolist", counting_tolist)
    torch.manual_seed(0)
    history = train_classifier(MLP(64, 10, hidden=16, depth=1), digits.X_train, digits.y_train, epochs=2, clip_norm=1.0)
    monkeypatch.undo()
    steps_per_epoch = math.ceil(len(digits.y_train) / 64)
    assert len(reads) == 2
    assert len(history.losses) == len(history.grad_norms) == 2 * steps_per_epoch
    assert all(isinstance(value, float) for value in history.losses + history.grad_norms)


def test_training_moves_the_data_once_not_each_batch(digits):
    """Every tensor moved with .to() is the whole data set, the model or all epochs' orders.

    On a GPU a copy from pageable host memory makes the host wait: a .to(device) per batch
    would be a sync per step (notebook 06), so the loop copies everything before its first step.
    """
    from torch.overrides import TorchFunctionMode

    class RecordMoves(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.shapes: list[tuple[int, ...]] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.to:
                self.shapes.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    X, y = digits.X_train[:300], digits.y_train[:300]
    torch.manual_seed(0)
    model = MLP(64, 10, hidden=16, depth=1)
    with RecordMoves() as moves:
        history = train_classifier(model, X, y, epochs=3, batch_size=64, clip_norm=1.0)
    assert len(history.losses) == 3 * 5
    batch_shapes = {(64, 64), (64,), (44, 64), (44,)}
    assert not batch_shapes & set(moves.shapes), f"a batch was moved on its own: {moves.shapes}"
    assert {(300, 64), (300,), (3, 300)} <= set(moves.shapes)


def test_progress_bar_is_plain_text_without_a_warning_where_jupyter_has_no_ipywidgets(digits, monkeypatch, capsys):
    """tqdm.auto in a Jupyter kernel without ipywidgets warns "IProgress not found"; we don't."""
    import sys
    import warnings
    from types import ModuleType

    ipython = ModuleType("IPython")  # a Jupyter kernel, as tqdm.autonotebook detects one
    ipython.get_ipython = lambda: type("ZMQInteractiveShell", (), {})()
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", ModuleType("ipykernel.zmqshell"))
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # makes `import ipywidgets` fail
    for name in ("tqdm.auto", "tqdm.autonotebook", "tqdm.notebook"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with warnings.catch_warnings(record=True) as caught:  # not "error": tqdm catches its own warning then
        warnings.simplefilter("always")
        train_classifier(MLP(64, 10, hidden=8, depth=1), digits.X_train[:128], digits.y_train[:128], progress=True)
    assert [str(w.message) for w in caught] == []
    assert "training: 100%" in capsys.readouterr().err  # the text bar, on stderr
