"""A plain, reproducible training loop for the notebooks' small classifiers.

Contract: ``train_classifier`` is seeded, runs on the given device, and records the
loss and the total gradient norm of every step, so notebooks can plot both. It copies the
data set and every epoch's shuffled order to the device once, before the first step, and
takes each batch there by indexing; it keeps the losses and norms on the device during an
epoch and reads them back once at its end. So nothing inside an epoch makes the host wait
for the device: one host-device sync per epoch, not one per step (notebook 06 explains why
that matters on a GPU). The data set must fit on the device beside the model: the
notebooks' data sets are small. ``clip_norm`` switches on ``clip_grad_norm_``. Nothing is printed except a tqdm bar
when ``progress=True``: a widget in Jupyter, plain text where ipywidgets is missing.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["History", "accuracy", "train_classifier"]


@dataclass
class History:
    """Per-step loss and total gradient norm (before any clipping) of one run."""

    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        """True if any loss was NaN or infinite."""
        return any(not math.isfinite(loss) for loss in self.losses)


def _progress_bar_class() -> type:
    """``tqdm.auto``'s bar, or the plain text bar where ipywidgets is not installed.

    Without ipywidgets, ``tqdm.auto`` in Jupyter also falls back to the text bar, but
    warns "IProgress not found" on the way.
    """
    if importlib.util.find_spec("ipywidgets") is None:
        from tqdm import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm


def train_classifier(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int = 5,
    batch_size: int = 64,
    lr: float = 0.1,
    optimizer: str = "sgd",
    momentum: float = 0.9,
    clip_norm: float | None = None,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> History:
    """Train ``model`` with cross-entropy on ``(X, y)`` and return its ``History``.

    ``optimizer`` is ``"sgd"`` (with ``momentum``) or ``"adam"``. The model is moved to
    ``device`` before the optimizer is built over its parameters, and ``X``, ``y`` and the
    shuffled order of every epoch (drawn on the CPU from a generator seeded with ``seed``)
    are copied there too, all before the first step: a copy from ordinary (pageable) host
    memory makes the host wait, so none happens between steps. A run whose loss turns NaN
    or infinite stops at the end of that epoch; its history ends at the first such step.
    """
    tqdm = _progress_bar_class()
    device = torch.device(device)
    model.to(device)
    if optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    elif optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    generator = torch.Generator().manual_seed(seed)
    orders = torch.empty(epochs, len(y), dtype=torch.long)  # drawn on the CPU: the same on every device
    for epoch in range(epochs):
        orders[epoch] = torch.randperm(len(y), generator=generator)
    # Every copy to the device happens here, before the first step; batches are then taken by
    # indexing on the device, so no step waits for a copy from host memory.
    X, y, orders = X.to(device), y.to(device), orders.to(device)
    loss_fn = nn.CrossEntropyLoss()
    history = History()
    model.train()
    steps_per_epoch = math.ceil(len(y) / batch_size)
    bar = tqdm(total=epochs * steps_per_epoch, disable=not progress, desc="training")
    for order in orders:
        step_values: list[torch.Tensor] = []  # (loss, norm) per step, still on the device
        for start in range(0, len(y), batch_size):
            index = order[start : start + batch_size]
            inputs, targets = X[index], y[index]
            loss = loss_fn(model(inputs), targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            if clip_norm is None:
                norm = torch.nn.utils.get_total_norm(grads)
            else:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            opt.step()
            step_values.append(torch.stack([loss.detach().float(), norm.float().to(loss.device)]))
            bar.update()
        losses, norms = torch.stack(step_values).T.tolist()  # the epoch's only sync
        history.losses.extend(losses)
        history.grad_norms.extend(norms)
        if history.diverged:
            first_bad = next(i for i, value in enumerate(history.losses) if not math.isfinite(value))
            del history.losses[first_bad + 1 :], history.grad_norms[first_bad + 1 :]
            break
    bar.close()
    return history


@torch.inference_mode()
def accuracy(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 1024,
    device: torch.device | str | None = None,
) -> float:
    """Fraction of ``X`` that ``model`` (in eval mode) labels correctly.

    Runs on ``device``, by default the device of the model's first parameter (the CPU for
    models without parameters, such as the legacy quantized ones).
    """
    was_training = model.training
    model.eval()
    if device is None:
        first = next(iter(model.parameters()), None)
        device = first.device if first is not None else torch.device("cpu")
    correct = 0
    for start in range(0, len(y), batch_size):
        logits = model(X[start : start + batch_size].to(device))
        correct += (logits.argmax(dim=1).cpu() == y[start : start + batch_size]).sum().item()
    model.train(was_training)
    return correct / len(y)
