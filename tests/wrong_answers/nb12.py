"""Wrong answers to notebook 12's exercises that its visible tests reject (issue 23, section 3).

Each is an answer a learner would write, beyond the cases in ``tests/notebooks/test_wrong_answers.py``:
the division by 16 left out (standardising looks scale-free, but the eps is not), the eps left
out or put under the square root as layer norm does, statistics per pixel over the images
instead of per image, a float64 result, a loop hidden in ``map`` (exercise 1); autocast
entered without ``enabled`` (it is on with ``dtype=None``), the device type read from
``is_cuda``, bfloat16 used whatever ``amp_dtype`` says, the gradients cleared after backward or
never, the loss printed every tenth step, the loss stored through ``.cpu()``, the optimizer
step taken under autocast, the model cast instead of autocast (exercise 2); the graded task's
images used for every task, the digits loaded from the split instead of ``task.data()``,
statistics per pixel, the first epoch's batches repeated, the course's reference solution
handed in as the answer (the yardstick the speed points are scaled by) (exercise 3).
"""

from __future__ import annotations

from tests.wrong_answers import Wrong

_IMAGES = """
def standardize_images(pixels):
    x = {x}
    return {result}
"""
IMAGES_NO_SCALING = _IMAGES.format(
    x="pixels.float()", result="(x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + 1e-5)"
)
IMAGES_NO_EPS = _IMAGES.format(
    x="pixels.float() / 16.0", result="(x - x.mean(dim=1, keepdim=True)) / x.std(dim=1, keepdim=True)"
)
IMAGES_EPS_UNDER_ROOT = _IMAGES.format(
    x="pixels.float() / 16.0", result="(x - x.mean(dim=1, keepdim=True)) / (x.var(dim=1, keepdim=True) + 1e-5).sqrt()"
)
IMAGES_PER_PIXEL = _IMAGES.format(
    x="pixels.float() / 16.0", result="(x - x.mean(dim=0, keepdim=True)) / (x.std(dim=0, keepdim=True) + 1e-5)"
)
IMAGES_FLOAT64 = _IMAGES.format(
    x="pixels.double() / 16.0", result="(x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + 1e-5)"
)
IMAGES_MAP = """
def standardize_images(pixels):
    return torch.stack(list(map(standardize_image, pixels)))
"""

_STEP = """
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    with {autocast}:
        loss = F.cross_entropy(model(images), labels)
    {update}
    losses[step] = {stored}
"""
_AUTOCAST = "torch.autocast(images.device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None)"
_UPDATE = "optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()"


def _step(autocast: str = _AUTOCAST, update: str = _UPDATE, stored: str = "loss.detach()") -> str:
    return _STEP.format(autocast=autocast, update=update, stored=stored)


STEP_AUTOCAST_ALWAYS_ON = _step(autocast="torch.autocast(images.device.type, dtype=amp_dtype)")
STEP_DEVICE_FROM_IS_CUDA = _step(
    autocast='torch.autocast("cuda" if images.is_cuda else "cpu", dtype=amp_dtype or torch.bfloat16, '
    "enabled=amp_dtype is not None)"
)
STEP_ALWAYS_BF16 = _step(
    autocast="torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=amp_dtype is not None)"
)
STEP_ZEROES_AFTER_BACKWARD = _step(update="loss.backward()\n    optimizer.zero_grad()\n    optimizer.step()")
STEP_NEVER_ZEROES = _step(update="loss.backward()\n    optimizer.step()")
STEP_PRINTS_EVERY_TENTH = (
    _step()
    + """    if step % 10 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
"""
)
STEP_STORES_ON_THE_CPU = _step(stored="loss.detach().cpu()")
STEP_OPTIMIZER_UNDER_AUTOCAST = _step(
    update=f"optimizer.zero_grad()\n    loss.backward()\n    with {_AUTOCAST}:\n        optimizer.step()"
)
STEP_CASTS_THE_MODEL = """
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    if amp_dtype is not None:
        model, images = model.to(amp_dtype), images.to(amp_dtype)
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses[step] = loss.detach()
"""

_FAST = """
def fast_train(task, device):
    device = torch.device(device)
    model = make_model(task, fused_gelu=True).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr, fused=True)
    {images}
    losses = torch.empty(task.steps, device=device)
    for step, batch in enumerate({batches}):
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses
"""
_PER_IMAGE = "x = pixels.float() / 16.0\n    images = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5)"
FAST_GRADED_TASK_IMAGES = _FAST.format(
    images="pixels, labels = GRADED_TASK.data()  # the task's own images only when it has no data_seed\n    "
    + _PER_IMAGE,
    batches="task.batch_order()",
)
FAST_LOADS_THE_DIGITS = _FAST.format(
    images="split = load_digits_split()\n"
    "    x, labels = split.X_train[: task.num_samples], split.y_train[: task.num_samples]\n"
    "    images = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5)",
    batches="task.batch_order()",
)
FAST_PER_PIXEL = _FAST.format(
    images="pixels, labels = task.data()\n    x = pixels.float() / 16.0\n"
    "    images = (x - x.mean(0)) / (x.std(0) + 1e-5)  # over the images, per pixel",
    batches="task.batch_order()",
)
FAST_FIRST_EPOCH_AGAIN = _FAST.format(
    images="pixels, labels = task.data()\n    " + _PER_IMAGE,
    batches="task.batch_order()[: task.num_samples // task.batch_size].repeat(task.epochs, 1)",
)

_WRONG_VALUES = "has the right shape and dtype but wrong values"
_DRAWN = r"warm-up, on weights and images drawn for it\): the loss at step"

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
IMAGES_GLOBAL_STATS = """
def standardize_images(pixels):
    x = pixels.float() / 16.0
    return (x - x.mean()) / (x.std() + 1e-5)
"""

IMAGES_POPULATION_STD = """
def standardize_images(pixels):
    x = pixels.float() / 16.0
    return (x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True, correction=0) + 1e-5)
"""

IMAGES_LOOP = """
def standardize_images(pixels):
    return torch.stack([standardize_image(p) for p in pixels])
"""

STEP_BODY = """
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

# Autocast done right, so that the answers below fail for their own mistake.
STEP_AUTOCAST = "with torch.autocast(images.device.type, dtype=amp_dtype or torch.bfloat16, enabled=bool(amp_dtype)):"

STEP_LOGS_ITEM = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    {STEP_AUTOCAST}
        loss = F.cross_entropy(model(images), labels)
    {STEP_BODY.strip()}
    losses[step] = loss.item()
"""

STEP_WRITES_ZEROS = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    {STEP_AUTOCAST}
        loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer.step()
    losses[step] = loss.detach()
"""

STEP_PER_SAMPLE = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    {STEP_AUTOCAST}
        loss = sum(F.cross_entropy(model(x[None]), t[None]) for x, t in zip(images, labels)) / len(labels)
    {STEP_BODY.strip()}
    losses[step] = loss.detach()
"""

STEP_KEEPS_GRAPH = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    loss = F.cross_entropy(model(images), labels)
    {STEP_BODY.strip()}
    losses[step] = loss
"""

STEP_IGNORES_AMP = f"""
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    loss = F.cross_entropy(model(images), labels)
    {STEP_BODY.strip()}
    losses[step] = loss.detach()
"""

STEP_CPU_AUTOCAST = """
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    with torch.autocast("cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
        loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses[step] = loss.detach()
"""

STEP_BACKWARD_IN_AUTOCAST = """
def train_step(model, optimizer, images, labels, losses, step, amp_dtype=None):
    with torch.autocast(images.device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    losses[step] = loss.detach()
"""

FAST_DEFAULT_LR = """
def fast_train(task, device):
    model = make_model(task, fused_gelu=True).to(device)
    optimizer = torch.optim.Adam(model.parameters())  # Adam's default lr, not task.lr
    pixels, labels = task.data()
    images = torch.stack([standardize_image(p) for p in pixels]).to(device)
    losses = torch.empty(task.steps, device=device)
    for step, batch in enumerate(task.batch_order()):
        loss = F.cross_entropy(model(images[batch]), labels.to(device)[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses
"""

FAST_OWN_SHUFFLE = """
def fast_train(task, device):
    model = make_model(task, fused_gelu=True).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)
    pixels, labels = task.data()
    images = torch.stack([standardize_image(p) for p in pixels]).to(device)
    order = torch.cat([torch.randperm(task.num_samples) for _ in range(task.epochs)])  # not task.batch_order()
    losses = torch.empty(task.steps, device=device)
    for step in range(task.steps):
        batch = order[step * task.batch_size : (step + 1) * task.batch_size]
        loss = F.cross_entropy(model(images[batch]), labels.to(device)[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses
"""

FAST_LOSS_LIST = """
def fast_train(task, device):
    model, losses = slow_train(task, device)
    return model, losses.tolist()
"""

FAST_THE_REFERENCE = """
from course_utils.capstone.reference import reference_train


def fast_train(task, device):
    return reference_train(task, device)
"""

FAST_HARD_CODED_WIDTH = """
def fast_train(task, device):
    return slow_train(replace(task, hidden=128), device)
"""


WRONG = [
    Wrong("12", "ex1_standardize_images", "no division by 16", IMAGES_NO_SCALING, "skips the division by 16", False),
    Wrong("12", "ex1_standardize_images", "no eps", IMAGES_NO_EPS, "leaves out STD_EPS", False),
    Wrong("12", "ex1_standardize_images", "eps under the root", IMAGES_EPS_UNDER_ROOT,
          "puts STD_EPS under the square root", False),
    Wrong("12", "ex1_standardize_images", "statistics per pixel", IMAGES_PER_PIXEL, "over dim 0", False),
    Wrong("12", "ex1_standardize_images", "float64 result", IMAGES_FLOAT64, "should have dtype torch.float32", False),
    Wrong("12", "ex1_standardize_images", "loop in map", IMAGES_MAP, "a loop over images", False),
    Wrong("12", "ex2_train_step", "autocast always on", STEP_AUTOCAST_ALWAYS_ON,
          r"with amp_dtype=None, the autocast regions should be \[\]", False),
    Wrong("12", "ex2_train_step", "device from is_cuda", STEP_DEVICE_FROM_IS_CUDA, r"images\.device\.type", False),
    Wrong("12", "ex2_train_step", "bfloat16 whatever amp_dtype", STEP_ALWAYS_BF16,
          r"with amp_dtype=torch\.float16, the autocast regions should be", False),
    Wrong("12", "ex2_train_step", "zero_grad after backward", STEP_ZEROES_AFTER_BACKWARD,
          rf"losses\[\d\] with amp_dtype=None {_WRONG_VALUES}", False),
    Wrong("12", "ex2_train_step", "never zeroes", STEP_NEVER_ZEROES, rf"with amp_dtype=None {_WRONG_VALUES}", False),
    Wrong("12", "ex2_train_step", "prints every tenth step", STEP_PRINTS_EVERY_TENTH, "read 1 values into", False),
    Wrong("12", "ex2_train_step", "stores through .cpu()", STEP_STORES_ON_THE_CPU, "values into Python", False),
    Wrong("12", "ex2_train_step", "optimizer step under autocast", STEP_OPTIMIZER_UNDER_AUTOCAST,
          r"the autocast regions should be \[\('cpu', torch\.bfloat16\)\], got \[\('cpu'", False),
    Wrong("12", "ex2_train_step", "casts the model", STEP_CASTS_THE_MODEL,
          r"with amp_dtype=torch\.bfloat16, the autocast regions should be", False),
    Wrong("12", "ex3_fast_train", "the graded task's images", FAST_GRADED_TASK_IMAGES, _DRAWN, False),
    Wrong("12", "ex3_fast_train", "loads the digits itself", FAST_LOADS_THE_DIGITS, _DRAWN, False),
    Wrong("12", "ex3_fast_train", "statistics per pixel", FAST_PER_PIXEL, "loss at step", False),
    Wrong("12", "ex3_fast_train", "first epoch again", FAST_FIRST_EPOCH_AGAIN, "loss at step", False),
    Wrong("12", "ex1_standardize_images", "one mean for all images", IMAGES_GLOBAL_STATS,
          "one mean and standard deviation for the whole batch", False),
    Wrong("12", "ex1_standardize_images", "population std", IMAGES_POPULATION_STD, "divides by 64, not 63", False),
    Wrong("12", "ex1_standardize_images", "loops over images", IMAGES_LOOP, "a loop over images", False),
    Wrong("12", "ex2_train_step", "logs with .item()", STEP_LOGS_ITEM, "values into Python", False),
    Wrong("12", "ex2_train_step", "writes zeros", STEP_WRITES_ZEROS, "not to zeros", False),
    Wrong("12", "ex2_train_step", "one sample at a time", STEP_PER_SAMPLE, "once per step", False),
    Wrong("12", "ex2_train_step", "keeps the graph", STEP_KEEPS_GRAPH, r"loss\.detach\(\)", False),
    Wrong("12", "ex2_train_step", "ignores amp_dtype", STEP_IGNORES_AMP, "amp_dtype=torch.bfloat16", False),
    Wrong("12", "ex2_train_step", "autocast on the CPU only", STEP_CPU_AUTOCAST, r"images\.device\.type", False),
    Wrong("12", "ex2_train_step", "backward inside autocast", STEP_BACKWARD_IN_AUTOCAST, "outside the autocast", False),
    Wrong("12", "ex3_fast_train", "Adam's default lr", FAST_DEFAULT_LR, "loss at step", False),
    Wrong("12", "ex3_fast_train", "shuffles on its own", FAST_OWN_SHUFFLE, "loss at step", False),
    Wrong("12", "ex3_fast_train", "losses as a list", FAST_LOSS_LIST, "torch.Tensor of losses", False),
    Wrong("12", "ex3_fast_train", "hard-codes the width", FAST_HARD_CODED_WIDTH, "named and shaped", False),
    Wrong("12", "ex3_fast_train", "hands in the reference", FAST_THE_REFERENCE,
          "runs the course's reference_train", False),
]  # fmt: skip
