"""Wrong answers to notebook 05's exercises (issues 22 and 23): each fails the visible tests, for its reason."""

from __future__ import annotations

from wrong_answers import Wrong

KAIMING = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    std = gain / math.sqrt(fan_in)
    return DRAW
"""


def kaiming(draw: str) -> str:
    """``kaiming_normal`` returning ``draw`` (an expression of std, fan_out, fan_in, generator)."""
    return KAIMING.replace("DRAW", draw)


TRUNCATED_AT_THREE = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    samples = torch.randn(fan_out, fan_in, generator=generator)
    while (outside := samples.abs() > 3).any():  # redraw until every sample lies within 3 standard deviations
        samples[outside] = torch.randn(int(outside.sum()), generator=generator)
    return gain / math.sqrt(fan_in) * samples
"""
UNIFORM_SAME_STD = kaiming("std * math.sqrt(3) * (2 * torch.rand(fan_out, fan_in, generator=generator) - 1)")

INIT = """
def init_weights(module):
    if CONDITION:
        nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
        if module.bias is not None:
            nn.init.zeros_(module.bias)
"""


def init(condition: str = "isinstance(module, nn.Linear)", body: str = "") -> str:
    """``init_weights`` with its condition (or its whole body) changed from the solution's."""
    source = INIT.replace("CONDITION", condition)
    return (
        source.replace('nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")', body)
        if body
        else source
    )


UNITS = """
def first_layer_units_identical(model, X, y):
    first = FIRST
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(X), y).backward()
    grad = first.weight.grad
    return bool(torch.allclose(grad, grad[:1].expand_as(grad)))
"""
RETURNS_A_TENSOR = UNITS.replace("FIRST", "next(m for m in model.modules() if isinstance(m, nn.Linear))").replace(
    "return bool(torch.allclose(grad, grad[:1].expand_as(grad)))", "return (grad == grad[0]).all()"
)

WRONG = [
    # Exercise 1: Kaiming normal by hand.
    Wrong(
        "05",
        "ex1_kaiming_normal",
        "clipped at 3 sigma",
        kaiming("std * torch.randn(fan_out, fan_in, generator=generator).clamp(-3, 3)"),
        "do not clip or truncate",
        False,
    ),
    Wrong("05", "ex1_kaiming_normal", "truncated at 3 sigma", TRUNCATED_AT_THREE, "do not clip or truncate", False),
    Wrong("05", "ex1_kaiming_normal", "uniform with the right std", UNIFORM_SAME_STD, "kurtosis", False),
    Wrong(
        "05",
        "ex1_kaiming_normal",
        "float64",
        kaiming("std * torch.randn(fan_out, fan_in, generator=generator, dtype=torch.float64)"),
        "should be float32",
        False,
    ),
    Wrong(
        "05",
        "ex1_kaiming_normal",
        "std squared",
        kaiming("std**2 * torch.randn(fan_out, fan_in, generator=generator)"),
        "std should be about",
        False,
    ),
    Wrong(
        "05",
        "ex1_kaiming_normal",
        "shape (fan_in, fan_out)",
        kaiming("std * torch.randn(fan_in, fan_out, generator=generator)"),
        r"should have shape \(256, 128\)",
        False,
    ),
    Wrong(
        "05",
        "ex1_kaiming_normal",
        "gain inside the root",
        kaiming("math.sqrt(gain / fan_in) * torch.randn(fan_out, fan_in, generator=generator)"),
        "std should be about",
        False,
    ),
    # Exercise 2: an init_weights for model.apply.
    Wrong(
        "05",
        "ex2_init_weights",
        "type(module) is nn.Linear",
        init("type(module) is nn.Linear"),
        r"^NonDynamicallyQuantizableLinear\(128, 128\) weight std",
        False,
    ),
    Wrong(
        "05",
        "ex2_init_weights",
        "by class name",
        init('type(module).__name__ == "Linear"'),
        r"^NonDynamicallyQuantizableLinear\(128, 128\) weight std",
        False,
    ),
    Wrong(
        "05",
        "ex2_init_weights",
        "fan_out mode",
        init().replace('mode="fan_in"', 'mode="fan_out"'),
        "weight std should be about",
        False,
    ),
    Wrong(
        "05",
        "ex2_init_weights",
        "Xavier normal",
        init(body="nn.init.xavier_normal_(module.weight)"),
        "weight std should be about",
        False,
    ),
    Wrong(
        "05",
        "ex2_init_weights",
        "Linear and Conv2d",
        init("isinstance(module, (nn.Linear, nn.Conv2d))"),
        "not a Linear: it must not change",
        False,
    ),
    Wrong(
        "05",
        "ex2_init_weights",
        "keeps the default biases",
        init().replace("nn.init.zeros_(module.bias)", "pass"),
        "bias",
        False,
    ),
    # Exercise 3: identical hidden units.
    Wrong(
        "05",
        "ex3_units_identical",
        "the model's first module",
        UNITS.replace("FIRST", "model[0]"),
        "a LayerNorm, then constant",
        False,
    ),
    Wrong(
        "05",
        "ex3_units_identical",
        "the last Linear",
        UNITS.replace("FIRST", "[m for m in model.modules() if isinstance(m, nn.Linear)][-1]"),
        "constant first two layers",
        False,
    ),
    Wrong("05", "ex3_units_identical", "returns a tensor", RETURNS_A_TENSOR, "should be a bool", False),
]
