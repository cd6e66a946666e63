"""course_utils.data: shapes, dtypes and determinism of every data source; notebook 03's resume recipe and workers."""

import itertools
import multiprocessing
import pickle
import sys

import pytest
import torch
from torch.utils.data import DataLoader

from course_utils.data import (
    NoisyDataset,
    RangeStream,
    ReadEverySample,
    SlowDataset,
    StragglerDataset,
    load_digits_split,
    make_classification,
    make_loader,
    make_regression,
    private_bytes,
    reseed_worker_generator,
)


def test_make_classification_shapes_and_seed():
    X, y = make_classification(100, 7, 3, seed=1)
    assert X.shape == (100, 7) and X.dtype == torch.float32
    assert y.shape == (100,) and y.dtype == torch.int64 and set(y.tolist()) <= {0, 1, 2}
    X2, y2 = make_classification(100, 7, 3, seed=1)
    torch.testing.assert_close(X, X2)
    assert torch.equal(y, y2)
    assert not torch.equal(X, make_classification(100, 7, 3, seed=2)[0])


def test_make_regression_shapes():
    X, y = make_regression(50, 4, seed=0)
    assert X.shape == (50, 4) and y.shape == (50, 1)


def test_digits_split():
    split = load_digits_split(test_fraction=0.25, seed=0)
    assert len(split.y_train) + len(split.y_test) == 1797
    assert len(split.y_test) == 449
    assert split.X_train.shape[1] == split.num_features == 64
    assert split.num_classes == 10
    assert split.X_train.min() >= 0.0 and split.X_train.max() <= 1.0
    again = load_digits_split(test_fraction=0.25, seed=0)
    assert torch.equal(split.y_test, again.y_test)
    assert not torch.equal(split.y_test, load_digits_split(seed=1).y_test)


def test_loader_order_is_fixed_by_seed():
    X, y = torch.arange(20.0).unsqueeze(1), torch.arange(20)

    def order(seed):
        return torch.cat([labels for _, labels in make_loader(X, y, batch_size=4, seed=seed)]).tolist()

    assert order(0) == order(0)
    assert order(0) != order(1)
    assert sorted(order(0)) == list(range(20))


def test_slow_dataset_is_deterministic():
    dataset = SlowDataset(num_samples=5, num_features=3, delay_s=0.0)
    assert len(dataset) == 5
    features, label = dataset[3]
    torch.testing.assert_close(features, torch.tensor([3.0, 4.0, 5.0]).sin())
    assert label == 3
    with pytest.raises(IndexError):
        dataset[5]


def _epoch_orders_after_resume(**loader_options):
    """Notebook 03's resume recipe on a loader with ``loader_options``.

    Returns the rest of the second epoch of an uninterrupted run, what a resumed run gets
    from the generator state saved at that epoch's start (two batches skipped), and what it
    gets from the state saved mid-epoch.
    """
    from torch.utils.data import DataLoader, TensorDataset

    def loader_and_generator():
        generator = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.arange(12))
        return DataLoader(data, batch_size=3, shuffle=True, generator=generator, **loader_options), generator

    def order(batches):
        return [int(value) for (batch,) in batches for value in batch]

    loader, generator = loader_and_generator()
    order(loader)  # a first, complete epoch
    epoch_start = generator.get_state()
    interrupted = iter(loader)
    next(interrupted), next(interrupted)
    mid_epoch = generator.get_state()
    rest = order(interrupted)

    resumed, resumed_generator = loader_and_generator()  # a new process would build them anew
    resumed_generator.set_state(epoch_start)
    from_epoch_start = order(itertools.islice(resumed, 2, None))
    resumed, resumed_generator = loader_and_generator()
    resumed_generator.set_state(mid_epoch)
    from_mid_epoch = order(resumed)[: len(rest)]
    return rest, from_epoch_start, from_mid_epoch


@pytest.mark.parametrize("loader_options", [{}, {"num_workers": 2}], ids=["main process", "2 workers"])
def test_resume_from_the_epoch_start_state_not_the_mid_epoch_one(loader_options):
    rest, from_epoch_start, from_mid_epoch = _epoch_orders_after_resume(**loader_options)
    assert from_epoch_start == rest
    assert from_mid_epoch != rest


def test_resume_recipe_does_not_hold_with_persistent_workers():
    # Notebook 03 says so: persistent workers draw their base seed from the generator only
    # once, so the uninterrupted run's second epoch and a resumed run's first one differ.
    rest, from_epoch_start, _ = _epoch_orders_after_resume(num_workers=2, persistent_workers=True)
    assert from_epoch_start != rest


# Notebook 03's worker demonstrations: the data sets and the worker_init_fn live in course_utils.data.


def test_straggler_dataset_returns_indices_and_rejects_out_of_range():
    dataset = StragglerDataset(num_samples=6, delay_s=0.0, slow_every=4, slow_delay_s=0.0)
    assert len(dataset) == 6
    assert [dataset[i] for i in range(6)] == list(range(6))
    with pytest.raises(IndexError):
        dataset[6]
    with pytest.raises(ValueError):
        StragglerDataset(slow_every=0)


@pytest.mark.parametrize("in_order", [True, False])
def test_straggler_epochs_deliver_every_sample_once(in_order):
    dataset = StragglerDataset(num_samples=16, delay_s=0.0, slow_every=8, slow_delay_s=0.02)
    loader = DataLoader(dataset, batch_size=2, num_workers=2, in_order=in_order)
    firsts = [int(batch[0]) for batch in loader]
    assert sorted(firsts) == list(range(0, 16, 2))
    if in_order:
        assert firsts == list(range(0, 16, 2))


def test_private_bytes_reads_this_process_on_linux():
    size = private_bytes()
    if sys.platform != "linux":
        assert size is None
    else:
        assert isinstance(size, int) and size > 0


@pytest.mark.skipif(
    private_bytes() is None or "fork" not in multiprocessing.get_all_start_methods(),
    reason="needs /proc/self/smaps_rollup and the fork start method",
)
def test_forked_worker_copies_python_objects_but_not_tensor_storage():
    # The claim notebook 03 makes (pytorch/pytorch#13246): reading Python objects writes their
    # reference counts, so a forked worker copies the pages holding them; a tensor's elements stay shared.
    values = torch.randn(2**21, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    grown = {}
    for name, samples in (("list", values.tolist()), ("tensor", values)):
        probe = DataLoader(ReadEverySample(samples), batch_size=None, num_workers=1, multiprocessing_context="fork")
        grown[name] = next(iter(probe))
    objects = len(values) * sys.getsizeof(1.0)
    assert grown["list"] >= objects  # each float in a 32-byte slot: about 4/3 of this
    assert grown["tensor"] < objects / 8  # what the worker itself writes (about 1.8 MB) is far below this


def test_read_every_sample_in_the_main_process():
    probe = ReadEverySample(list(range(100)), batch_size=7)
    assert len(probe) == 1
    grown = probe[0]
    assert grown is None or isinstance(grown, int)
    with pytest.raises(IndexError):
        probe[1]


def _first_two_batches(worker_init_fn):
    loader = DataLoader(
        NoisyDataset(num_samples=8, seed=0),
        batch_size=2,
        num_workers=2,
        worker_init_fn=worker_init_fn,
        generator=torch.Generator().manual_seed(0),
    )
    return list(itertools.islice(loader, 2))


def test_copied_numpy_generator_repeats_in_every_worker_unless_reseeded():
    first, second = _first_two_batches(None)
    assert torch.equal(first, second)  # worker 0 and worker 1 drew the same numbers
    first, second = _first_two_batches(reseed_worker_generator)
    assert not torch.equal(first, second)
    again = _first_two_batches(reseed_worker_generator)
    assert torch.equal(again[0], first) and torch.equal(again[1], second)  # a seeded loader repeats


def test_reseed_worker_generator_outside_a_worker_raises():
    with pytest.raises(RuntimeError, match="worker"):
        reseed_worker_generator(0)


@pytest.mark.parametrize(("stop", "num_workers"), [(10, 0), (10, 2), (11, 2), (1, 2)])
def test_range_stream_shards_between_workers(stop, num_workers):
    loader = DataLoader(RangeStream(0, stop), batch_size=None, num_workers=num_workers)
    assert sorted(int(v) for v in loader) == list(range(stop))


def test_unsharded_range_stream_repeats_in_every_worker():
    loader = DataLoader(RangeStream(3, 8, shard=False), batch_size=None, num_workers=2)
    assert sorted(int(v) for v in loader) == sorted(2 * list(range(3, 8)))


def test_worker_datasets_pickle_by_reference_to_their_module():
    # What spawned workers need: the classes and the worker_init_fn are found by name in course_utils.data.
    for obj in (StragglerDataset(), ReadEverySample([1.0]), NoisyDataset(), RangeStream(0, 1), reseed_worker_generator):
        assert b"course_utils.data" in pickle.dumps(obj)
        assert type(pickle.loads(pickle.dumps(obj))) is type(obj)
