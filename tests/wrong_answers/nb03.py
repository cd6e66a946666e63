"""Wrong answers to notebook 03's exercises (issues 22 and 23): each fails the visible tests, for its reason."""

from __future__ import annotations

from tests.wrong_answers import Wrong

OPTIONS = """
def loader_options(device, num_workers):
    has_workers = num_workers > 0
    return {
        "num_workers": num_workers,
        "pin_memory": PIN,
        "persistent_workers": PERSISTENT,
        "prefetch_factor": PREFETCH,
    }
"""


def options(pin: str = 'device.type not in ("cpu", "mps")', persistent: str = "has_workers", prefetch: str = "") -> str:
    """``loader_options`` with one expression changed from the solution's."""
    return (
        OPTIONS.replace("PIN", pin)
        .replace("PERSISTENT", persistent)
        .replace("PREFETCH", prefetch or "4 if has_workers else None")
    )


PAD = """
def pad_collate(batch, padding_value=0):
    from torch.nn.utils.rnn import pad_sequence

    sequences = [sequence for sequence, _ in batch]
    padded = pad_sequence(sequences, batch_first=True, padding_value=padding_value)
    lengths = torch.tensor([len(sequence) for sequence in sequences], dtype=torch.int64)
    labels = torch.tensor([label for _, label in batch], dtype=torch.int64)
    return padded, lengths, labels
"""
SORTS_BY_LENGTH = PAD.replace(
    "    sequences = [", "    batch = sorted(batch, key=lambda sample: len(sample[0]), reverse=True)\n    sequences = ["
)
PADS_INTO_ZEROS = """
def pad_collate(batch, padding_value=0):
    sequences = [sequence for sequence, _ in batch]
    longest = max(len(sequence) for sequence in sequences)
    padded = torch.full((len(sequences), longest, *sequences[0].shape[1:]), float(padding_value))
    for row, sequence in enumerate(sequences):
        padded[row, : len(sequence)] = sequence
    lengths = torch.tensor([len(sequence) for sequence in sequences])
    labels = torch.tensor([label for _, label in batch])
    return padded, lengths, labels
"""

LOADER = """
def make_reproducible_loader(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=GENERATOR)
"""
SHARED_GENERATOR = """
SHARED = torch.Generator()


def make_reproducible_loader(dataset, batch_size, seed):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=SHARED.manual_seed(seed))
"""

SHARDS = """
def shard_indices(num_samples, num_replicas, shuffle, seed=0, epoch=0):
    dataset = TensorDataset(torch.arange(num_samples))
    shards = []
    for rank in range(num_replicas):
        sampler = DistributedSampler(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, SEED)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards
"""
STRIDED_RANGE = """
def shard_indices(num_samples, num_replicas, shuffle, seed=0, epoch=0):
    order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    indices = order if shuffle else list(range(num_samples))
    return [indices[rank::num_replicas] for rank in range(num_replicas)]
"""
CONTIGUOUS_CHUNKS = """
def shard_indices(num_samples, num_replicas, shuffle, seed=0, epoch=0):
    dataset = TensorDataset(torch.arange(num_samples))
    order = list(DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=shuffle, seed=seed))
    per_rank = -(-num_samples // num_replicas)
    order += order[: per_rank * num_replicas - num_samples]
    return [order[rank * per_rank : (rank + 1) * per_rank] for rank in range(num_replicas)]
"""
AS_TENSORS = SHARDS.replace("SEED", "seed=seed").replace("list(sampler)", "torch.tensor(list(sampler))")

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
# 03 · Feed the model with batches
PIN_FOR_ANY_ACCELERATOR = """
def loader_options(device, num_workers):
    has_workers = num_workers > 0
    return {
        "num_workers": num_workers,
        "pin_memory": device.type != "cpu",
        "persistent_workers": has_workers,
        "prefetch_factor": 4 if has_workers else None,
    }
"""

TIME_FIRST_PADDING = """
def pad_collate(batch, padding_value=0):
    from torch.nn.utils.rnn import pad_sequence

    sequences = [sequence for sequence, _ in batch]
    padded = pad_sequence(sequences, padding_value=padding_value)
    lengths = torch.tensor([len(sequence) for sequence in sequences])
    labels = torch.tensor([label for _, label in batch])
    return padded, lengths, labels
"""

GLOBAL_SEED = """
def make_reproducible_loader(dataset, batch_size, seed):
    torch.manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)
"""

SEEDED_SAMPLER = """
from torch.utils.data import RandomSampler


def make_reproducible_loader(dataset, batch_size, seed):
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
"""

NO_SET_EPOCH = """
def shard_indices(num_samples, num_replicas, shuffle, seed=0, epoch=0):
    dataset = TensorDataset(torch.arange(num_samples))
    return [
        list(DistributedSampler(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed))
        for rank in range(num_replicas)
    ]
"""

# 03 · Feed the model with batches, third review.
PINS_ONLY_CUDA_ZERO = PIN_FOR_ANY_ACCELERATOR.replace('device.type != "cpu"', 'str(device) in ("cuda", "cuda:0")')

IGNORES_PADDING_VALUE = TIME_FIRST_PADDING.replace(
    "pad_sequence(sequences, padding_value=padding_value)", "pad_sequence(sequences, batch_first=True)"
)

DROPS_THE_LAST_BATCH = """
def make_reproducible_loader(dataset, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator, drop_last=True)
"""

IGNORES_THE_SEED = """
def shard_indices(num_samples, num_replicas, shuffle, seed=0, epoch=0):
    dataset = TensorDataset(torch.arange(num_samples))
    shards = []
    for rank in range(num_replicas):
        sampler = DistributedSampler(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards
"""


WRONG = [
    # Exercise 1: the DataLoader pins for the current accelerator, whichever it is, except MPS.
    Wrong("03", "ex1_loader_options", "pins for CUDA only", options(pin='device.type == "cuda"'), "'xpu'", False),
    Wrong(
        "03",
        "ex1_loader_options",
        "asks torch.cuda.is_available()",
        options(pin="torch.cuda.is_available()"),
        r"loader_options\(torch.device\('cuda'\), 2\)\['pin_memory'\]",
        False,
    ),
    Wrong(
        "03",
        "ex1_loader_options",
        "pins only with workers",
        options(pin='device.type not in ("cpu", "mps") and has_workers'),
        "any CUDA index",
        False,
    ),
    Wrong("03", "ex1_loader_options", "pin_memory as an int", options(pin='int(device.type == "cuda")'), "bool", False),
    Wrong(
        "03",
        "ex1_loader_options",
        "persistent workers always",
        options(persistent="True"),
        r"torch.device\('cpu'\), 0\)\['persistent_workers'\]",
        False,
    ),
    Wrong(
        "03",
        "ex1_loader_options",
        "workers from two on",
        options(persistent="num_workers > 1", prefetch="4 if num_workers > 1 else None"),
        r"torch.device\('mps'\), 1\)\['persistent_workers'\]",
        False,
    ),
    Wrong(
        "03",
        "ex1_loader_options",
        "prefetch_factor 2 without workers",
        options(prefetch="4 if has_workers else 2"),
        r"\['prefetch_factor'\] should be a NoneType",
        False,
    ),
    # Exercise 2: padding.
    Wrong("03", "ex2_pad_collate", "sorts by length", SORTS_BY_LENGTH, r"^padded \(float sequences", False),
    Wrong("03", "ex2_pad_collate", "float padding for int sequences", PADS_INTO_ZEROS, "dtype torch.int64", False),
    Wrong(
        "03",
        "ex2_pad_collate",
        "lengths as a list",
        PAD.replace(
            "torch.tensor([len(sequence) for sequence in sequences], dtype=torch.int64)",
            "[len(sequence) for sequence in sequences]",
        ),
        "^lengths should be a torch.Tensor",
        False,
    ),
    Wrong(
        "03",
        "ex2_pad_collate",
        "counts elements, not steps",
        PAD.replace("len(sequence) for", "sequence.numel() for"),
        r"^lengths \(float sequences",
        False,
    ),
    Wrong(
        "03",
        "ex2_pad_collate",
        "int32 lengths",
        PAD.replace("for sequence in sequences], dtype=torch.int64", "for sequence in sequences], dtype=torch.int32"),
        "dtype torch.int64",
        False,
    ),
    Wrong(
        "03",
        "ex2_pad_collate",
        "float labels",
        PAD.replace("for _, label in batch], dtype=torch.int64", "for _, label in batch], dtype=torch.float32"),
        "^labels should have dtype torch.int64",
        False,
    ),
    Wrong(
        "03",
        "ex2_pad_collate",
        "returns a list",
        PAD.replace("return padded, lengths, labels", "return [padded, lengths, labels]"),
        "should be a tuple",
        False,
    ),
    # Exercise 3: reproducible shuffling.
    Wrong(
        "03",
        "ex3_reproducible_loader",
        "torch.manual_seed as the generator",
        LOADER.replace("GENERATOR", "torch.manual_seed(seed)"),
        "second loader",
        False,
    ),
    Wrong(
        "03",
        "ex3_reproducible_loader",
        "one generator shared by every loader",
        SHARED_GENERATOR,
        "second loader",
        False,
    ),
    Wrong(
        "03",
        "ex3_reproducible_loader",
        "does not shuffle",
        LOADER.replace("shuffle=True", "shuffle=False").replace("GENERATOR", "torch.Generator().manual_seed(seed)"),
        "should shuffle",
        False,
    ),
    # Exercise 4: shards.
    Wrong("03", "ex4_shard_indices", "strided slices, no padding", STRIDED_RANGE, "the length of shard", False),
    Wrong(
        "03",
        "ex4_shard_indices",
        "contiguous chunks",
        CONTIGUOUS_CHUNKS,
        r"shard_indices\(10, 3, shuffle=False\)",
        False,
    ),
    Wrong(
        "03",
        "ex4_shard_indices",
        "drops the tail",
        SHARDS.replace("SEED", "seed=seed, drop_last=True"),
        "length of shard",
        False,
    ),
    Wrong(
        "03",
        "ex4_shard_indices",
        "a seed per rank",
        SHARDS.replace("SEED", "seed=seed + rank"),
        "shard 0 of|repeated|distinct",
        False,
    ),
    Wrong("03", "ex4_shard_indices", "tensors, not lists", AS_TENSORS, "should be a list", False),
    Wrong("03", "ex1_loader_options", "pins memory for mps", PIN_FOR_ANY_ACCELERATOR, "'mps'", False),
    Wrong("03", "ex2_pad_collate", "pads time-first", TIME_FIRST_PADDING, "^padded", False),
    Wrong("03", "ex3_reproducible_loader", "seeds the global generator", GLOBAL_SEED, "second loader", False),
    Wrong(
        "03",
        "ex3_reproducible_loader",
        "seeds a RandomSampler",
        SEEDED_SAMPLER,
        "the construction the statement",
        False,
    ),
    Wrong("03", "ex4_shard_indices", "forgets set_epoch", NO_SET_EPOCH, "another epoch", False),
    Wrong("03", "ex1_loader_options", "pins only cuda:0", PINS_ONLY_CUDA_ZERO, "any CUDA index", False),
    Wrong("03", "ex2_pad_collate", "ignores padding_value", IGNORES_PADDING_VALUE, r"padding_value=-1\.0", False),
    Wrong("03", "ex3_reproducible_loader", "drops the last batch", DROPS_THE_LAST_BATCH, "last one smaller", False),
    Wrong("03", "ex4_shard_indices", "ignores the seed", IGNORES_THE_SEED, r"shuffle=True, seed=3, epoch=1", False),
]

PINS_CUDA_AND_XPU = """
def loader_options(device, num_workers):
    has_workers = num_workers > 0
    return {
        "num_workers": num_workers,
        "pin_memory": device.type in ("cuda", "xpu"),
        "persistent_workers": has_workers,
        "prefetch_factor": 4 if has_workers else None,
    }
"""
WRONG.append(
    Wrong("03", "ex1_loader_options", "pins for CUDA and XPU only", PINS_CUDA_AND_XPU, "MTIA is an accelerator", False)
)
