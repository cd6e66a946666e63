"""Notebook 02 (measure and reduce memory): wrong answers of the issue 22/23 review, caught by the visible tests."""

from __future__ import annotations

from tests.wrong_answers import Wrong

_ESTIMATE = """
def training_memory_bytes(model, optimizer):
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in copies:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    tensors = TENSORS
    params = sum(p.numel() * SIZE for p in tensors)
    grads = sum(p.numel() * SIZE for p in tensors if p.requires_grad)
    state = copies[optimizer] * grads
    return {"parameters": params, "gradients": grads, "optimizer_state": state, "total": params + grads + state}
"""
FIRST_ELEMENT_SIZE = _ESTIMATE.replace("TENSORS", "list(model.parameters())").replace(
    "SIZE", "tensors[0].element_size()"
)
NOT_FLOAT64_IS_FOUR_BYTES = _ESTIMATE.replace("TENSORS", "list(model.parameters())").replace(
    "SIZE", "(8 if p.dtype == torch.float64 else 4)"
)
BUFFERS_AS_PARAMETERS = _ESTIMATE.replace("TENSORS", "list(model.parameters()) + list(model.buffers())").replace(
    "SIZE", "p.element_size()"
)

_VIEW_OR_COPY = """
def shares_storage(a, b):
    SHARES


def new_bytes(result, base):
    return 0 if shares_storage(result, base) else result.untyped_storage().nbytes()
"""
THROUGH_BASE = _VIEW_OR_COPY.replace(
    "SHARES", "return a._base is b or b._base is a or (a._base is not None and a._base is b._base)"
)
THROUGH_ROOT_BASE = _VIEW_OR_COPY.replace(
    "SHARES",
    "root = lambda t: t if t._base is None else t._base\n    return a.device == b.device and root(a) is root(b)",
)
SAME_TENSOR_OR_BASE = _VIEW_OR_COPY.replace(
    "SHARES", "return a is b or a._base is b or b._base is a or (a._base is not None and a._base is b._base)"
)
IS_SET_TO = _VIEW_OR_COPY.replace("SHARES", "return a.is_set_to(b)")

_BY_DTYPE = """
class SavedBytesByDtype:
    def __init__(self):
        self.bytes_by_dtype = {}

    def __enter__(self):
        PACK
        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._hooks.__exit__(*exc_info)

    @property
    def total_bytes(self):
        return sum(self.bytes_by_dtype.values())
"""
LAST_DTYPE_WINS = _BY_DTYPE.replace(
    "PACK",
    """storages = {}

        def pack(tensor):
            key = (str(tensor.device), tensor.untyped_storage().data_ptr())
            storages[key] = (tensor.dtype, tensor.untyped_storage().nbytes())  # the last save decides
            self.bytes_by_dtype.clear()
            for dtype, nbytes in storages.values():
                self.bytes_by_dtype[dtype] = self.bytes_by_dtype.get(dtype, 0) + nbytes
            return tensor
""",
)
ONCE_PER_DTYPE = _BY_DTYPE.replace(
    "PACK",
    """seen = set()

        def pack(tensor):
            key = (str(tensor.device), tensor.untyped_storage().data_ptr(), tensor.dtype)
            if key not in seen:
                seen.add(key)
                nbytes = tensor.untyped_storage().nbytes()
                self.bytes_by_dtype[tensor.dtype] = self.bytes_by_dtype.get(tensor.dtype, 0) + nbytes
            return tensor
""",
)
TENSOR_BYTES_NOT_STORAGE = ONCE_PER_DTYPE.replace(
    "(str(tensor.device), tensor.untyped_storage().data_ptr(), tensor.dtype)",
    "(str(tensor.device), tensor.untyped_storage().data_ptr())",
).replace("nbytes = tensor.untyped_storage().nbytes()", "nbytes = tensor.numel() * tensor.element_size()")
PACK_RETURNS_NOTHING = ONCE_PER_DTYPE.replace(
    "(str(tensor.device), tensor.untyped_storage().data_ptr(), tensor.dtype)",
    "(str(tensor.device), tensor.untyped_storage().data_ptr())",
).replace("            return tensor\n", "")  # the right bookkeeping, but pack returns None

SIZES_WITHOUT_BFLOAT16 = """
def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    size = {torch.float16: 2, torch.float32: 4, torch.float64: 8}[dtype]
    return batch_size * (in_features + depth * hidden) * size
"""
FORGETS_THE_INPUT = """
def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    return batch_size * depth * hidden * torch.empty((), dtype=dtype).element_size()
"""
LAST_INPUT_TWICE = """
def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    return batch_size * (in_features + (depth + 1) * hidden) * torch.empty((), dtype=dtype).element_size()
"""

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
# 02 · Measure and reduce memory
FROZEN_GET_GRADIENTS = """
def training_memory_bytes(model, optimizer):
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in copies:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = copies[optimizer] * params
    return {"parameters": params, "gradients": params, "optimizer_state": state, "total": 2 * params + state}
"""

SAME_DATA_PTR = """
def shares_storage(a, b):
    return a.device == b.device and a.data_ptr() == b.data_ptr()


def new_bytes(result, base):
    return 0 if shares_storage(result, base) else result.untyped_storage().nbytes()
"""

EVERY_SAVE_COUNTED = """
class SavedBytesByDtype:
    def __init__(self):
        self.bytes_by_dtype = {}

    def __enter__(self):
        def pack(tensor):
            size = tensor.numel() * tensor.element_size()
            self.bytes_by_dtype[tensor.dtype] = self.bytes_by_dtype.get(tensor.dtype, 0) + size
            return tensor

        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._hooks.__exit__(*exc_info)

    @property
    def total_bytes(self):
        return sum(self.bytes_by_dtype.values())
"""

RELU_OUTPUT_TWICE = """
def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    element_size = torch.empty((), dtype=dtype).element_size()
    return batch_size * (in_features + 2 * depth * hidden) * element_size
"""

# 02 · Measure and reduce memory, third review: the visible tests cover every case of the statements.
TRAINING_MEMORY = """
def training_memory_bytes(model, optimizer):
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in copies:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    state = copies[optimizer] * grads
    return {"parameters": params, "gradients": grads, "optimizer_state": state, "total": params + grads + state}
"""

MOMENTUM_TWO_BUFFERS = TRAINING_MEMORY.replace('"momentum": 1', '"momentum": 2')

UNKNOWN_NAME_ACCEPTED = TRAINING_MEMORY.replace(
    '    if optimizer not in copies:\n        raise ValueError(f"unknown optimizer {optimizer!r}")\n', ""
).replace("copies[optimizer]", "copies.get(optimizer, 0)")

SHARED_WEIGHT_TWICE = TRAINING_MEMORY.replace(
    "model.parameters()", "(q for module in model.modules() for q in module.parameters(recurse=False))"
)

FOUR_BYTES_A_PARAMETER = TRAINING_MEMORY.replace("p.numel() * p.element_size()", "p.numel() * 4")

COUNTS_THE_VIEW_ONLY = """
def shares_storage(a, b):
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def new_bytes(result, base):
    return 0 if shares_storage(result, base) else result.numel() * result.element_size()
"""

COUNTS_TENSORS_NOT_STORAGES = EVERY_SAVE_COUNTED.replace(
    "        def pack(tensor):\n",
    "        seen = set()\n\n"
    "        def pack(tensor):\n"
    "            if tensor.untyped_storage().data_ptr() in seen:\n"
    "                return tensor\n"
    "            seen.add(tensor.untyped_storage().data_ptr())\n",
)

RUNS_THE_MODEL = """
from course_utils import MLP


def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    net = MLP(in_features, 3, hidden=hidden, depth=depth).to(dtype)
    return saved_activation_bytes(net, torch.randn(batch_size, in_features, dtype=dtype))
"""

FOUR_BYTE_ACTIVATIONS = """
def mlp_activation_bytes(batch_size, in_features, hidden, depth, dtype):
    return batch_size * (in_features + depth * hidden) * 4
"""


WRONG = [
    Wrong(
        "02",
        "ex1_training_memory",
        "the first parameter's element size for all",
        FIRST_ELEMENT_SIZE,
        r"a bfloat16 Linear\(8, 8\) then a float64 Linear\(8, 3\), 'adam'\)\['gradients'\] should be 360, got 198",
        False,
    ),
    Wrong(
        "02",
        "ex1_training_memory",
        "four bytes unless float64",
        NOT_FLOAT64_IS_FOUR_BYTES,
        r"a bfloat16 Linear\(8, 8\) then a float64 Linear\(8, 3\), 'adam'\)\['gradients'\] should be 360, got 504",
        False,
    ),
    Wrong(
        "02",
        "ex1_training_memory",
        "counts buffers as parameters",
        BUFFERS_AS_PARAMETERS,
        r"a Linear\(8, 8\) then a BatchNorm1d\(8\), 'momentum'\)\['parameters'\] should be 352",
        False,
    ),
    Wrong("02", "ex2_view_or_copy", "follows _base", THROUGH_BASE, r"shares_storage\(x, x", False),
    Wrong("02", "ex2_view_or_copy", "follows _base to the root", THROUGH_ROOT_BASE, r"x\.detach\(\)", False),
    Wrong("02", "ex2_view_or_copy", "the same tensor, or _base", SAME_TENSOR_OR_BASE, r"x\.detach\(\)", False),
    Wrong("02", "ex2_view_or_copy", "is_set_to", IS_SET_TO, r"shares_storage\(x, x\.t\(\)\) should be True", False),
    Wrong(
        "02",
        "ex3_saved_bytes_by_dtype",
        "files a storage under the last dtype that saved it",
        LAST_DTYPE_WINS,
        "saved as float32, then as int32",
        False,
    ),
    Wrong(
        "02",
        "ex3_saved_bytes_by_dtype",
        "counts a storage once per dtype",
        ONCE_PER_DTYPE,
        "saved as float32, then as int32",
        False,
    ),
    Wrong(
        "02",
        "ex3_saved_bytes_by_dtype",
        "pack returns nothing",
        PACK_RETURNS_NOTHING,
        "backward failed after a SavedBytesByDtype block .*does your pack hook return the tensor",
        False,
    ),
    Wrong(
        "02",
        "ex3_saved_bytes_by_dtype",
        "the view's bytes, not its storage's",
        TENSOR_BYTES_NOT_STORAGE,
        r"a counter over views of one tensor\.bytes_by_dtype\[torch\.float64\] should be 288, got 192",
        False,
    ),
    Wrong("02", "ex4_mlp_activations", "no size for bfloat16", SIZES_WITHOUT_BFLOAT16, "raised KeyError", False),
    Wrong(
        "02",
        "ex4_mlp_activations",
        "forgets the input",
        FORGETS_THE_INPUT,
        r"mlp_activation_bytes\(8, 16, 32, 2, float32\) should be 2560, got 2048",
        False,
    ),
    Wrong(
        "02",
        "ex4_mlp_activations",
        "counts the last hidden layer twice",
        LAST_INPUT_TWICE,
        r"mlp_activation_bytes\(8, 16, 32, 2, float32\) should be 2560, got 3584",
        False,
    ),
    Wrong(
        "02",
        "ex1_training_memory",
        "frozen parameters get gradients",
        FROZEN_GET_GRADIENTS,
        "first layer frozen",
        False,
    ),
    Wrong("02", "ex2_view_or_copy", "compares data_ptr", SAME_DATA_PTR, "a view that starts at an offset", False),
    Wrong("02", "ex3_saved_bytes_by_dtype", "counts every save", EVERY_SAVE_COUNTED, r"a counter around b \* b", False),
    Wrong(
        "02",
        "ex4_mlp_activations",
        "counts relu outputs twice",
        RELU_OUTPUT_TWICE,
        r"mlp_activation_bytes\(8, 16, 32, 2, float32\)",
        False,
    ),
    Wrong(
        "02",
        "ex1_training_memory",
        "momentum keeps two buffers",
        MOMENTUM_TWO_BUFFERS,
        r"'momentum'\)\['optimizer_state'\] should be 13864, got 27728",
        False,
    ),
    Wrong("02", "ex1_training_memory", "accepts unknown names", UNKNOWN_NAME_ACCEPTED, "'rmsprop'.*ValueError", False),
    Wrong(
        "02", "ex1_training_memory", "counts a shared weight twice", SHARED_WEIGHT_TWICE, "sharing one weight", False
    ),
    Wrong("02", "ex1_training_memory", "four bytes a parameter", FOUR_BYTES_A_PARAMETER, "a float64 MLP", False),
    Wrong("02", "ex2_view_or_copy", "counts the view only", COUNTS_THE_VIEW_ONLY, "should be 48, got 12", False),
    Wrong(
        "02",
        "ex3_saved_bytes_by_dtype",
        "counts tensors, not storages",
        COUNTS_TENSORS_NOT_STORAGES,
        "views of one tensor",
        False,
    ),
    Wrong("02", "ex4_mlp_activations", "runs the model", RUNS_THE_MODEL, "don't run the model", False),
    Wrong("02", "ex4_mlp_activations", "four bytes an element", FOUR_BYTE_ACTIVATIONS, "12, 3, float64", False),
]

SHARES_WITHOUT_DEVICE = """
def shares_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def new_bytes(result, base):
    return 0 if shares_storage(result, base) else result.untyped_storage().nbytes()
"""
WRONG.append(Wrong("02", "ex2_view_or_copy", "no device check", SHARES_WITHOUT_DEVICE, "on two devices", False))
