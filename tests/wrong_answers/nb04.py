"""Wrong answers to notebook 04's exercises (issues 22 and 23): each fails the visible tests, for its reason."""

from __future__ import annotations

from tests.wrong_answers import Wrong

BATCHNORM = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean = x.mean(dim=0)
        var = x.var(dim=0, correction=0)
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * x.var(dim=0, correction=1)
    else:
        mean, var = running_mean, running_var
        new_mean, new_var = running_mean.clone(), running_var.clone()
    output = (x - mean) / torch.sqrt(var + eps) * weight + bias
    return output, new_mean, new_var
"""
UNBIASED_NORMALISATION = BATCHNORM.replace("var = x.var(dim=0, correction=0)", "var = x.var(dim=0)")
EPS_OUTSIDE_THE_ROOT = BATCHNORM.replace("torch.sqrt(var + eps)", "(torch.sqrt(var) + eps)")
MOMENTUM_REVERSED = BATCHNORM.replace(
    "(1 - momentum) * running_mean + momentum * mean", "momentum * running_mean + (1 - momentum) * mean"
)
EVAL_UPDATES_STATISTICS = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean = (1 - momentum) * running_mean + momentum * x.mean(dim=0)
    new_var = (1 - momentum) * running_var + momentum * x.var(dim=0, correction=1)
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
    else:
        mean, var = running_mean, running_var
    return (x - mean) / torch.sqrt(var + eps) * weight + bias, new_mean, new_var
"""
ALWAYS_BATCH_STATISTICS = BATCHNORM.replace("    if training:\n", "    if True:\n")
KEEPS_THE_BATCH_DIMENSION = BATCHNORM.replace("mean = x.mean(dim=0)", "mean = x.mean(dim=0, keepdim=True)")
RETURNS_A_LIST = BATCHNORM.replace("return output, new_mean, new_var", "return [output, new_mean, new_var]")

FOLD = """
def fold_linear_bn(linear, bn):
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        bias = linear.bias if linear.bias is not None else torch.zeros_like(bn.running_mean)
        folded = nn.Linear(
            linear.in_features, linear.out_features, device=linear.weight.device, dtype=linear.weight.dtype
        )
        folded.weight.copy_(linear.weight * scale[:, None])
        folded.bias.copy_(scale * (bias - bn.running_mean) + bn.bias)
    return folded
"""
IGNORES_GAMMA = FOLD.replace("scale = bn.weight / torch.sqrt", "scale = 1 / torch.sqrt")
IGNORES_BETA = FOLD.replace(" + bn.bias)", ")")
ADDS_THE_MEAN = FOLD.replace("(bias - bn.running_mean)", "(bias + bn.running_mean)")
FOLDS_IN_PLACE = """
def fold_linear_bn(linear, bn):
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        linear.weight.mul_(scale[:, None])
        if linear.bias is not None:
            linear.bias.copy_(scale * (linear.bias - bn.running_mean) + bn.bias)
    return linear
"""
DEFAULT_DTYPE_AND_DEVICE = FOLD.replace(", device=linear.weight.device, dtype=linear.weight.dtype", "")
DEFAULT_DEVICE = FOLD.replace("device=linear.weight.device, ", "")
COPIES_THE_LINEAR = """
import copy


def fold_linear_bn(linear, bn):
    folded = copy.deepcopy(linear)
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        folded.weight.mul_(scale[:, None])
        if folded.bias is not None:
            folded.bias.copy_(scale * (folded.bias - bn.running_mean) + bn.bias)
    return folded
"""

FREEZE = """
def freeze_batchnorm(model):
    for module in MODULES:
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            ACTION
    return model
"""


def freeze(modules: str = "model.modules()", action: str = "module.eval()") -> str:
    """``freeze_batchnorm`` with its loop or its action changed from the solution's."""
    return FREEZE.replace("MODULES", modules).replace("ACTION", action)


# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
# 04 · Stabilise training with BatchNorm
BIASED_RUNNING_VAR = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * var
    else:
        mean, var = running_mean, running_var
        new_mean, new_var = running_mean.clone(), running_var.clone()
    return (x - mean) / torch.sqrt(var + eps) * weight + bias, new_mean, new_var
"""

CALLS_F_BATCH_NORM = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    output = torch.nn.functional.batch_norm(x, new_mean, new_var, weight, bias, training, momentum, eps)
    return output, new_mean, new_var
"""

DROPS_LINEAR_BIAS = """
def fold_linear_bn(linear, bn):
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        folded = nn.Linear(linear.in_features, linear.out_features)
        folded.weight.copy_(linear.weight * scale[:, None])
        folded.bias.copy_(bn.bias - scale * bn.running_mean)
    return folded
"""

WHOLE_MODEL_EVAL = """
def freeze_batchnorm(model):
    return model.eval()
"""

# 04 · review 3: the bans see every name (forbidden_calls), and the visible tests ask for every case.
BN_WITH_TORCH_ALIAS = """
from torch import batch_norm as _bn

def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    return _bn(x, weight, bias, new_mean, new_var, training, momentum, eps, False), new_mean, new_var
"""

BN_WITH_NATIVE = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    output, _, _ = torch.native_batch_norm(x, weight, bias, new_mean, new_var, training, momentum, eps)
    return output, new_mean, new_var
"""

BN_WITH_ATEN_OP = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    new_mean, new_var = running_mean.clone(), running_var.clone()
    output, _, _ = torch.ops.aten.native_batch_norm(x, weight, bias, new_mean, new_var, training, momentum, eps)
    return output, new_mean, new_var
"""

BN_WITH_LAYER_NORM = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if not training:
        return (x - running_mean) / torch.sqrt(running_var + eps) * weight + bias, running_mean, running_var
    output = torch.nn.functional.layer_norm(x.T, x.shape[:1], eps=eps).T * weight + bias
    new_mean = (1 - momentum) * running_mean + momentum * x.mean(dim=0)
    new_var = (1 - momentum) * running_var + momentum * x.var(dim=0)
    return output, new_mean, new_var
"""

BN_FIXED_MOMENTUM = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        new_mean = 0.9 * running_mean + 0.1 * mean
        new_var = 0.9 * running_var + 0.1 * x.var(dim=0)
    else:
        mean, var, new_mean, new_var = running_mean, running_var, running_mean.clone(), running_var.clone()
    return (x - mean) / torch.sqrt(var + eps) * weight + bias, new_mean, new_var
"""

BN_FIXED_EPS = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * x.var(dim=0)
    else:
        mean, var, new_mean, new_var = running_mean, running_var, running_mean.clone(), running_var.clone()
    return (x - mean) / torch.sqrt(var + 1e-5) * weight + bias, new_mean, new_var
"""

BN_IN_PLACE = """
def batchnorm1d_forward(x, weight, bias, running_mean, running_var, training, momentum=0.1, eps=1e-5):
    if training:
        mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        running_mean.mul_(1 - momentum).add_(momentum * mean)
        running_var.mul_(1 - momentum).add_(momentum * x.var(dim=0))
    else:
        mean, var = running_mean, running_var
    return (x - mean) / torch.sqrt(var + eps) * weight + bias, running_mean, running_var
"""

FOLD_WITH_FUSION_ALIAS = """
from torch.nn.utils.fusion import fuse_linear_bn_weights as _f

def fold_linear_bn(linear, bn):
    weight, bias = _f(linear.weight, linear.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    folded = nn.Linear(linear.in_features, linear.out_features)
    with torch.no_grad():
        folded.weight.copy_(weight)
        folded.bias.copy_(bias)
    return folded
"""

FOLD_WITH_FUSE_MODULES = """
import copy

def fold_linear_bn(linear, bn):
    pair = torch.nn.Sequential(copy.deepcopy(linear), copy.deepcopy(bn)).eval()
    return torch.ao.quantization.fuse_modules(pair, [["0", "1"]])[0]
"""

FOLD_FIXED_EPS = """
def fold_linear_bn(linear, bn):
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + 1e-5)
        bias = linear.bias if linear.bias is not None else torch.zeros_like(bn.running_mean)
        folded = nn.Linear(linear.in_features, linear.out_features)
        folded.weight.copy_(linear.weight * scale[:, None])
        folded.bias.copy_(scale * (bias - bn.running_mean) + bn.bias)
    return folded
"""

FOLD_SCALES_IN_PLACE = """
def fold_linear_bn(linear, bn):
    with torch.no_grad():
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        bias = linear.bias if linear.bias is not None else torch.zeros_like(bn.running_mean)
        folded = nn.Linear(linear.in_features, linear.out_features)
        folded.weight.copy_(linear.weight.mul_(scale[:, None]))
        folded.bias.copy_(scale * (bias - bn.running_mean) + bn.bias)
    return folded
"""

FREEZE_ONLY_1D = """
def freeze_batchnorm(model):
    for module in model.modules():
        if isinstance(module, nn.BatchNorm1d):
            module.eval()
    return model
"""

FREEZE_TRAINS_THE_REST = """
def freeze_batchnorm(model):
    for module in model.modules():
        module.train(not isinstance(module, nn.modules.batchnorm._BatchNorm))
    return model
"""


WRONG = [
    # Exercise 1: BatchNorm by hand.
    Wrong(
        "04",
        "ex1_batchnorm_forward",
        "unbiased variance to normalise",
        UNBIASED_NORMALISATION,
        "^train-mode output",
        False,
    ),
    Wrong(
        "04",
        "ex1_batchnorm_forward",
        "eps outside the square root",
        EPS_OUTSIDE_THE_ROOT,
        r"output \(momentum=0\.3, eps=0\.01\)",
        False,
    ),
    Wrong(
        "04",
        "ex1_batchnorm_forward",
        "momentum the weight of the old value",
        MOMENTUM_REVERSED,
        "^train-mode new_running_mean",
        False,
    ),
    Wrong(
        "04",
        "ex1_batchnorm_forward",
        "updates the statistics in eval mode",
        EVAL_UPDATES_STATISTICS,
        "^eval-mode new_running_mean",
        False,
    ),
    Wrong(
        "04",
        "ex1_batchnorm_forward",
        "batch statistics in eval mode",
        ALWAYS_BATCH_STATISTICS,
        "^eval-mode output",
        False,
    ),
    Wrong(
        "04",
        "ex1_batchnorm_forward",
        "keepdim running mean",
        KEEPS_THE_BATCH_DIMENSION,
        r"new_running_mean .*should have shape \(4,\)",
        False,
    ),
    Wrong("04", "ex1_batchnorm_forward", "returns a list", RETURNS_A_LIST, "should be a tuple", False),
    # Exercise 2: fold BatchNorm into a Linear.
    Wrong(
        "04", "ex2_fold_linear_bn", "ignores gamma", IGNORES_GAMMA, r"^folded\(x\) for a 6->4 layer with bias", False
    ),
    Wrong("04", "ex2_fold_linear_bn", "ignores beta", IGNORES_BETA, r"^folded\(x\) for a 6->4 layer with bias", False),
    Wrong(
        "04",
        "ex2_fold_linear_bn",
        "adds the running mean",
        ADDS_THE_MEAN,
        r"^folded\(x\) for a 6->4 layer with bias",
        False,
    ),
    Wrong("04", "ex2_fold_linear_bn", "folds into the given Linear", FOLDS_IN_PLACE, "return a new nn.Linear", False),
    Wrong(
        "04",
        "ex2_fold_linear_bn",
        "a float32 layer for float64 ones",
        DEFAULT_DTYPE_AND_DEVICE,
        "linear's dtype torch.float64",
        False,
    ),
    Wrong("04", "ex2_fold_linear_bn", "a CPU layer for layers elsewhere", DEFAULT_DEVICE, "meta device", False),
    Wrong("04", "ex2_fold_linear_bn", "a copy keeps a missing bias", COPIES_THE_LINEAR, "needs a bias", False),
    # Exercise 3: freeze the BatchNorm layers, wherever they sit.
    Wrong("04", "ex3_freeze_batchnorm", "children() instead of modules()", freeze("model.children()"), "nested", False),
    Wrong(
        "04",
        "ex3_freeze_batchnorm",
        "stops tracking instead of evaluating",
        freeze(action="module.track_running_stats = False"),
        "should be in evaluation mode",
        False,
    ),
    Wrong(
        "04",
        "ex3_freeze_batchnorm",
        "momentum 0 instead of eval",
        freeze(action="module.momentum = 0.0"),
        "should be in evaluation mode",
        False,
    ),
    Wrong(
        "04",
        "ex3_freeze_batchnorm",
        "freezes the parameters only",
        freeze(action="module.requires_grad_(False)"),
        "should be in evaluation mode",
        False,
    ),
    Wrong(
        "04",
        "ex3_freeze_batchnorm",
        "returns nothing",
        freeze().replace("    return model\n", ""),
        "return the model",
        False,
    ),
    Wrong(
        "04",
        "ex1_batchnorm_forward",
        "biased running variance",
        BIASED_RUNNING_VAR,
        "train-mode new_running_var",
        False,
    ),
    Wrong("04", "ex1_batchnorm_forward", "calls F.batch_norm", CALLS_F_BATCH_NORM, "tensor arithmetic", False),
    Wrong(
        "04",
        "ex2_fold_linear_bn",
        "drops the linear bias",
        DROPS_LINEAR_BIAS,
        r"folded\(x\) for a 6->4 layer",
        False,
    ),
    Wrong(
        "04",
        "ex3_freeze_batchnorm",
        "puts the whole model in eval",
        WHOLE_MODEL_EVAL,
        "should still be in training mode",
        False,
    ),
    Wrong("04", "ex1_batchnorm_forward", "torch.batch_norm aliased", BN_WITH_TORCH_ALIAS, "tensor arithmetic", False),
    Wrong("04", "ex1_batchnorm_forward", "torch.native_batch_norm", BN_WITH_NATIVE, "tensor arithmetic", False),
    Wrong("04", "ex1_batchnorm_forward", "a torch.ops.aten operator", BN_WITH_ATEN_OP, "tensor arithmetic", False),
    Wrong("04", "ex1_batchnorm_forward", "layer_norm on the transpose", BN_WITH_LAYER_NORM, "layer_norm", False),
    Wrong("04", "ex1_batchnorm_forward", "fixed momentum", BN_FIXED_MOMENTUM, r"mean \(momentum=0\.3", False),
    Wrong("04", "ex1_batchnorm_forward", "fixed eps", BN_FIXED_EPS, r"output \(momentum=0\.3, eps=0\.01\)", False),
    Wrong("04", "ex1_batchnorm_forward", "updates the running stats in place", BN_IN_PLACE, "do not modify it", False),
    Wrong("04", "ex2_fold_linear_bn", "fusion under an alias", FOLD_WITH_FUSION_ALIAS, "fold by hand", False),
    Wrong("04", "ex2_fold_linear_bn", "quantization fuse_modules", FOLD_WITH_FUSE_MODULES, "fold by hand", False),
    Wrong("04", "ex2_fold_linear_bn", "eps fixed at 1e-5", FOLD_FIXED_EPS, r"eps=0\.5", False),
    Wrong("04", "ex2_fold_linear_bn", "scales linear.weight in place", FOLD_SCALES_IN_PLACE, "must not change", False),
    Wrong("04", "ex3_freeze_batchnorm", "BatchNorm1d only", FREEZE_ONLY_1D, "BatchNorm2d", False),
    Wrong("04", "ex3_freeze_batchnorm", "trains the others", FREEZE_TRAINS_THE_REST, "evaluation mode", False),
]
