"""Wrong answers to notebook 05's exercises (issues 22 and 23): each fails the visible tests, for its reason."""

from __future__ import annotations

from tests.wrong_answers import Wrong

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

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
KAIMING_WITH_INIT = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    weight = torch.empty(fan_out, fan_in)
    return torch.nn.init.normal_(weight, std=gain / math.sqrt(fan_in), generator=generator)
"""

KAIMING_WITH_ALIAS = """
from torch.nn.init import normal_ as draw

def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    return draw(torch.empty(fan_out, fan_in), std=gain / math.sqrt(fan_in), generator=generator)
"""

KAIMING_FAN_OUT = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    return gain / math.sqrt(fan_out) * torch.randn(fan_out, fan_in, generator=generator)
"""

INIT_UNIFORM = """
def init_weights(module):
    if isinstance(module, nn.Linear):
        nn.init.kaiming_uniform_(module.weight, nonlinearity="relu")
        if module.bias is not None:
            nn.init.zeros_(module.bias)
"""

GRADIENTS_ARE_ZERO = """
def first_layer_units_identical(model, X, y):
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(X), y).backward()
    return bool(torch.allclose(first.weight.grad, torch.zeros_like(first.weight.grad)))
"""

WEIGHTS_NOT_GRADIENTS = """
def first_layer_units_identical(model, X, y):
    weight = next(m for m in model.modules() if isinstance(m, nn.Linear)).weight
    return bool(torch.allclose(weight, weight[:1].expand_as(weight)))
"""

STALE_GRADIENTS = """
def first_layer_units_identical(model, X, y):
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    nn.functional.cross_entropy(model(X), y).backward()
    grad = first.weight.grad
    return bool(torch.allclose(grad, grad[:1].expand_as(grad)))
"""

# 05 · review 3: every case the statements ask for is in the visible tests.
KAIMING_IGNORES_GAIN = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    return math.sqrt(2.0 / fan_in) * torch.randn(fan_out, fan_in, generator=generator)
"""

KAIMING_DEFAULT_GAIN_ONE = """
def kaiming_normal(fan_out, fan_in, gain=1.0, generator=None):
    return gain / math.sqrt(fan_in) * torch.randn(fan_out, fan_in, generator=generator)
"""

KAIMING_GLOBAL_GENERATOR = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    return gain / math.sqrt(fan_in) * torch.randn(fan_out, fan_in)
"""

KAIMING_OWN_GENERATOR = """
def kaiming_normal(fan_out, fan_in, gain=math.sqrt(2.0), generator=None):
    own = torch.Generator().manual_seed(0)
    return gain / math.sqrt(fan_in) * torch.randn(fan_out, fan_in, generator=own)
"""

INIT_EVERY_WEIGHT = """
def init_weights(module):
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() >= 2:
        nn.init.kaiming_normal_(weight, mode="fan_in", nonlinearity="relu")
    if isinstance(getattr(module, "bias", None), torch.Tensor):
        nn.init.zeros_(module.bias)
"""

UNITS_TAKES_A_STEP = """
def first_layer_units_identical(model, X, y):
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(X), y).backward()
    optimizer.step()
    grad = first.weight.grad
    return bool(torch.allclose(grad, grad[:1].expand_as(grad)))
"""


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
    Wrong("05", "ex1_kaiming_normal", "calls torch.nn.init", KAIMING_WITH_INIT, "without torch.nn.init", False),
    Wrong(
        "05",
        "ex1_kaiming_normal",
        "imports torch.nn.init under another name",
        KAIMING_WITH_ALIAS,
        "without torch.nn.init",
        False,
    ),
    Wrong("05", "ex1_kaiming_normal", "scales by fan_out", KAIMING_FAN_OUT, "std should be about", False),
    Wrong("05", "ex2_init_weights", "uniform instead of normal", INIT_UNIFORM, "kurtosis", False),
    Wrong(
        "05", "ex3_units_identical", "tests for zero gradients", GRADIENTS_ARE_ZERO, "constant first two layers", False
    ),
    Wrong(
        "05",
        "ex3_units_identical",
        "compares weights, not gradients",
        WEIGHTS_NOT_GRADIENTS,
        "identical first-layer weights, random second layer",
        False,
    ),
    Wrong("05", "ex3_units_identical", "keeps stale gradients", STALE_GRADIENTS, "stale", False),
    Wrong("05", "ex1_kaiming_normal", "ignores gain", KAIMING_IGNORES_GAIN, r"gain=1\): std should be about", False),
    Wrong("05", "ex1_kaiming_normal", "default gain 1", KAIMING_DEFAULT_GAIN_ONE, r"\(400, 100\): std", False),
    Wrong("05", "ex1_kaiming_normal", "global generator", KAIMING_GLOBAL_GENERATOR, "seeded alike", False),
    Wrong("05", "ex1_kaiming_normal", "its own generator", KAIMING_OWN_GENERATOR, "seeded differently", False),
    Wrong("05", "ex2_init_weights", "initialises every weight", INIT_EVERY_WEIGHT, "not a Linear: it must not", False),
    Wrong("05", "ex3_units_identical", "takes an optimiser step", UNITS_TAKES_A_STEP, "the weights changed", False),
]

UNITS_SUM_LOSS = """
def first_layer_units_identical(model, X, y):
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    model.zero_grad(set_to_none=True)
    model(X).sum().backward()
    grad = first.weight.grad
    return bool(torch.allclose(grad, grad[:1].expand_as(grad)))
"""
UNITS_ROWS_0_AND_1 = """
def first_layer_units_identical(model, X, y):
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(X), y).backward()
    grad = first.weight.grad
    return bool(torch.allclose(grad[0], grad[1]))
"""
WRONG += [
    Wrong(
        "05",
        "ex3_units_identical",
        "sums the outputs as its loss",
        UNITS_SUM_LOSS,
        "is your loss the cross-entropy",
        False,
    ),
    Wrong(
        "05",
        "ex3_units_identical",
        "compares rows 0 and 1 only",
        UNITS_ROWS_0_AND_1,
        "compare every row with the first",
        False,
    ),
]
