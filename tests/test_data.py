"""course_utils.data: shapes, dtypes and determinism of every data source; the resume recipe of notebook 03."""

import itertools

import pytest
import torch

from course_utils.data import SlowDataset, load_digits_split, make_classification, make_loader, make_regression


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
