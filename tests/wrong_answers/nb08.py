"""Notebook 08 (DDP): wrong answers of the issue 22/23 review, each caught by the visible tests."""

from __future__ import annotations

from tests.wrong_answers import Wrong

CONTIGUOUS_BLOCKS = """
def shard_indices(num_samples, num_replicas, rank):
    per_rank = -(-num_samples // num_replicas)
    indices = list(range(num_samples))
    while len(indices) < per_rank * num_replicas:
        indices += indices[: per_rank * num_replicas - len(indices)]
    return indices[rank * per_rank : (rank + 1) * per_rank]
"""
PADS_WITH_THE_LAST_INDEX = """
def shard_indices(num_samples, num_replicas, rank):
    total = -(-num_samples // num_replicas) * num_replicas
    indices = list(range(num_samples)) + [num_samples - 1] * (total - num_samples)
    return indices[rank:total:num_replicas]
"""
TENSOR_ELEMENTS = """
def shard_indices(num_samples, num_replicas, rank):
    total = -(-num_samples // num_replicas) * num_replicas
    return list((torch.arange(total) % num_samples)[rank::num_replicas])
"""
REBINDS_DATA = """
def all_reduce_mean_(tensors):
    mean = torch.stack(tensors).mean(dim=0)
    for tensor in tensors:
        tensor.data = mean  # the same object, but every rank now shares one storage
"""
INTEGER_RATIO = """
def scale_for_ranks(per_rank_batch, world_size, accumulation_steps, base_lr, base_batch):
    effective_batch = per_rank_batch * world_size * accumulation_steps
    return effective_batch, base_lr * (effective_batch // base_batch)
"""
SCALES_BY_RANKS_ONLY = """
def scale_for_ranks(per_rank_batch, world_size, accumulation_steps, base_lr, base_batch):
    return per_rank_batch * world_size * accumulation_steps, base_lr * world_size
"""
SENDS_THE_WHOLE_TENSOR = """
def ring_allreduce_bytes(num_elements, world_size, element_size=4):
    return 2.0 * (world_size - 1) * num_elements * element_size
"""

EX1, EX2, EX3, EX4 = "ex1_shard_indices", "ex2_all_reduce_mean", "ex3_scale_for_ranks", "ex4_ring_allreduce_bytes"

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
SHARDS_FROM_SAMPLER = """
def shard_indices(num_samples, num_replicas, rank):
    return list(DistributedSampler(range(num_samples), num_replicas=num_replicas, rank=rank, shuffle=False))
"""

SHARDS_UNPADDED = """
def shard_indices(num_samples, num_replicas, rank):
    return list(range(rank, num_samples, num_replicas))
"""

MEAN_OF_OVERWRITTEN = """
def all_reduce_mean_(tensors):
    for tensor in tensors:
        tensor.copy_(torch.stack(tensors).mean(dim=0))
"""

SUM_NOT_MEAN = """
def all_reduce_mean_(tensors):
    total = torch.stack(tensors).sum(dim=0)
    for tensor in tensors:
        tensor.copy_(total)
"""

BATCH_WITHOUT_ACCUMULATION = """
def scale_for_ranks(per_rank_batch, world_size, accumulation_steps, base_lr, base_batch):
    effective_batch = per_rank_batch * world_size
    return effective_batch, base_lr * effective_batch / base_batch
"""

RING_HALF = """
def ring_allreduce_bytes(num_elements, world_size, element_size=4):
    return (world_size - 1) * num_elements * element_size / world_size
"""

R3_08_PADS_ONCE = """
def shard_indices(num_samples, num_replicas, rank):
    total = -(-num_samples // num_replicas) * num_replicas
    indices = list(range(num_samples))
    indices += indices[: total - len(indices)]
    return indices[rank:total:num_replicas]
"""

R3_08_ONE_SHARED_TENSOR = """
def all_reduce_mean_(tensors):
    mean = torch.stack(tensors).mean(dim=0)
    for tensor in tensors:
        tensor.set_(mean)
"""

R3_08_LR_OVER_256 = """
def scale_for_ranks(per_rank_batch, world_size, accumulation_steps, base_lr, base_batch):
    effective_batch = per_rank_batch * world_size * accumulation_steps
    return effective_batch, base_lr * effective_batch / 256
"""

R3_08_RING_FOUR_BYTES = """
def ring_allreduce_bytes(num_elements, world_size, element_size=4):
    return 2 * (world_size - 1) * num_elements * 4 / world_size
"""

R3_08_RING_INTEGER = """
def ring_allreduce_bytes(num_elements, world_size, element_size=4):
    return 2 * (world_size - 1) * num_elements * element_size // world_size
"""


WRONG = [
    Wrong(
        "08", EX1, "contiguous blocks", CONTIGUOUS_BLOCKS, r"shard_indices\(8, 2, 1\) should be \[1, 3, 5, 7\]", False
    ),
    Wrong("08", EX1, "pads with the last index", PADS_WITH_THE_LAST_INDEX, r"\(with padding\) should be", False),
    Wrong("08", EX1, "a list of tensors", TENSOR_ELEMENTS, r"got \[tensor\(1\)", False),
    Wrong("08", EX2, "tensor.data = mean", REBINDS_DATA, r"shared memory\?", False),
    Wrong("08", EX3, "integer division of the batch ratio", INTEGER_RATIO, r"scaled to a batch of 96", False),
    Wrong("08", EX3, "scales by the ranks only", SCALES_BY_RANKS_ONLY, "effective batch equals the base batch", False),
    Wrong(
        "08",
        EX4,
        "every round sends the whole tensor",
        SENDS_THE_WHOLE_TENSOR,
        r"\(1000, 2\) should be about 4000",
        False,
    ),
    Wrong("08", "ex1_shard_indices", "asks the sampler", SHARDS_FROM_SAMPLER, "without DistributedSampler", False),
    Wrong("08", "ex1_shard_indices", "no padding", SHARDS_UNPADDED, r"\(with padding\) should be", False),
    Wrong("08", "ex2_all_reduce_mean", "mean of overwritten values", MEAN_OF_OVERWRITTEN, "wrong values", False),
    Wrong("08", "ex2_all_reduce_mean", "sum, not mean", SUM_NOT_MEAN, "wrong values", False),
    Wrong("08", "ex3_scale_for_ranks", "forgets accumulation", BATCH_WITHOUT_ACCUMULATION, "should be 1024", False),
    Wrong("08", "ex4_ring_allreduce_bytes", "reduce-scatter only", RING_HALF, "should be about 4000", False),
    Wrong("08", "ex1_shard_indices", "pads only once", R3_08_PADS_ONCE, "repeats more than once", False),
    Wrong(
        "08",
        "ex2_all_reduce_mean",
        "one tensor shared by all ranks",
        R3_08_ONE_SHARED_TENSOR,
        r"shared memory\?",
        False,
    ),
    Wrong(
        "08",
        "ex3_scale_for_ranks",
        "divides by 256, not base_batch",
        R3_08_LR_OVER_256,
        "base_lr=0.05 at base_batch=32",
        False,
    ),
    Wrong(
        "08",
        "ex4_ring_allreduce_bytes",
        "ignores element_size",
        R3_08_RING_FOUR_BYTES,
        r"element_size=2\) should be about 800",
        False,
    ),
    Wrong(
        "08", "ex4_ring_allreduce_bytes", "integer division", R3_08_RING_INTEGER, "should be a float, got int", False
    ),
]
