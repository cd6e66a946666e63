"""The small reference models the notebooks share.

Contract: constructors are deterministic given ``torch.manual_seed`` and take only
sizes and switches; no model moves itself to a device.
"""

from __future__ import annotations

from torch import nn

__all__ = ["MLP", "DigitsCNN"]


class MLP(nn.Sequential):
    """A multilayer perceptron: ``depth`` hidden layers of width ``hidden``.

    With ``batchnorm=True`` each hidden ``Linear`` (then without bias, since BatchNorm
    subtracts the mean anyway) is followed by ``BatchNorm1d`` before the activation.

    >>> MLP(64, 10, hidden=32, depth=2)
    MLP(
      (0): Linear(in_features=64, out_features=32, bias=True)
      (1): ReLU()
      (2): Linear(in_features=32, out_features=32, bias=True)
      (3): ReLU()
      (4): Linear(in_features=32, out_features=10, bias=True)
    )
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        hidden: int = 128,
        depth: int = 2,
        batchnorm: bool = False,
        activation: type[nn.Module] = nn.ReLU,
    ) -> None:
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth):
            layers.append(nn.Linear(width, hidden, bias=not batchnorm))
            if batchnorm:
                layers.append(nn.BatchNorm1d(hidden))
            layers.append(activation())
            width = hidden
        layers.append(nn.Linear(width, out_features))
        super().__init__(*layers)


class DigitsCNN(nn.Module):
    """A small convolutional net for 8x8 digit images: input ``(n, 64)`` or ``(n, 1, 8, 8)``."""

    def __init__(self, num_classes: int = 10, channels: int = 16, batchnorm: bool = False) -> None:
        super().__init__()

        def conv_block(c_in: int, c_out: int) -> list[nn.Module]:
            block: list[nn.Module] = [nn.Conv2d(c_in, c_out, 3, padding=1, bias=not batchnorm)]
            if batchnorm:
                block.append(nn.BatchNorm2d(c_out))
            return [*block, nn.ReLU()]

        self.features = nn.Sequential(
            *conv_block(1, channels),
            nn.MaxPool2d(2),
            *conv_block(channels, 2 * channels),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(2 * channels * 2 * 2, num_classes)

    def forward(self, x):
        x = x.reshape(-1, 1, 8, 8)
        return self.classifier(self.features(x).flatten(1))
