"""course_utils.models: layer structure and output shapes."""

import torch
from torch import nn

from course_utils.models import MLP, DigitsCNN


def test_mlp_shapes_and_layers():
    model = MLP(64, 10, hidden=32, depth=3)
    assert model(torch.randn(5, 64)).shape == (5, 10)
    assert sum(isinstance(m, nn.Linear) for m in model) == 4
    assert not any(isinstance(m, nn.BatchNorm1d) for m in model)


def test_mlp_batchnorm_drops_redundant_bias():
    model = MLP(8, 2, hidden=16, depth=2, batchnorm=True, activation=nn.Tanh)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    assert [m.bias is None for m in linears] == [True, True, False]
    assert sum(isinstance(m, nn.BatchNorm1d) for m in model) == 2
    assert sum(isinstance(m, nn.Tanh) for m in model) == 2


def test_mlp_is_deterministic_under_seed():
    torch.manual_seed(3)
    a = MLP(4, 2)
    torch.manual_seed(3)
    b = MLP(4, 2)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_digits_cnn_accepts_flat_and_image_inputs():
    model = DigitsCNN(batchnorm=True)
    assert model(torch.randn(3, 64)).shape == (3, 10)
    assert model(torch.randn(3, 1, 8, 8)).shape == (3, 10)
