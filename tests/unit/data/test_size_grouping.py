"""Size-grouped batches of molecules with atoms (`group_by_size`, for models on dense pair
tensors): every molecule once per epoch, in a seeded order, shared out across DDP
processes, batches of like atom counts; off by default."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from oodmol.data.batches import PointCloudBatch
from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.features import GraphSet, PointCloudFeatures, VectorFeatures

N_MOLECULES = 203  # not a multiple of the batch size: a last, partial batch
BATCH = 8


def point_clouds(n: int = N_MOLECULES, seed: int = 0) -> GraphSet:
    rng = np.random.default_rng(seed)
    clouds = []
    for _ in range(n):
        atoms = int(rng.integers(1, 60))
        clouds.append(
            {
                "z": rng.integers(1, 10, atoms).astype(np.int64),
                "pos": rng.normal(size=(atoms, 3)).astype(np.float32),
            }
        )
    y = rng.normal(size=n)
    return GraphSet(clouds, y, PointCloudBatch, atom_fields=("z", "pos"), edge_fields=())


def datamodule(dataset, group_by_size: bool, features=None, seed: int = 0) -> MoleculeDataModule:
    dm = MoleculeDataModule(
        task=None,
        split=None,
        featurizer=None,
        features=features or PointCloudFeatures(),
        data_dir=".",
        batch_size=BATCH,
        eval_batch_size=BATCH,
        seed=seed,
        group_by_size=group_by_size,
    )
    dm.datasets = {"train": dataset, "id": dataset}
    return dm


def epoch(dm: MoleculeDataModule, number: int = 0) -> list[np.ndarray]:
    """The molecule indices of each training batch of epoch `number`."""
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(number)
    return [batch.index.numpy() for batch in loader]


def spread(dataset: GraphSet, batches: list[np.ndarray]) -> float:
    """Mean over the batches of (largest − smallest atom count)."""
    return float(np.mean([np.ptp(dataset.atom_counts[b]) for b in batches]))


@pytest.fixture(scope="module")
def dataset() -> GraphSet:
    return point_clouds()


def test_every_molecule_once_per_epoch_in_batches_of_like_size(dataset):
    grouped, plain = datamodule(dataset, True), datamodule(dataset, False)
    for number in range(2):
        batches = epoch(grouped, number)
        assert sorted(np.concatenate(batches).tolist()) == list(range(N_MOLECULES))
        assert [len(b) for b in batches[:-1]] == [BATCH] * (N_MOLECULES // BATCH)
        assert spread(dataset, batches) < 0.5 * spread(dataset, epoch(plain, number))


def test_order_is_fixed_by_seed_and_epoch(dataset):
    first = np.concatenate(epoch(datamodule(dataset, True), 0))
    again = np.concatenate(epoch(datamodule(dataset, True), 0))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, np.concatenate(epoch(datamodule(dataset, True), 1)))
    other_seed = np.concatenate(epoch(datamodule(dataset, True, seed=1), 0))
    assert not np.array_equal(first, other_seed)


def test_shared_out_across_ddp_processes(dataset):
    """Two processes draw disjoint shares of equal size that cover every molecule (the
    one missing from an even share repeats, as DistributedSampler does), each grouped."""
    shares = []
    for rank in range(2):
        dm = datamodule(dataset, True)
        on_cpu = SimpleNamespace(root_device=torch.device("cpu"))
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank, strategy=on_cpu)
        batches = epoch(dm)
        shares.append(np.concatenate(batches))
        assert spread(dataset, batches) < 10
    assert len(shares[0]) == len(shares[1]) == (N_MOLECULES + 1) // 2
    together = np.concatenate(shares)
    assert set(together.tolist()) == set(range(N_MOLECULES))
    assert len(together) - len(set(together.tolist())) == 1


def test_evaluation_batches_go_smallest_first(dataset):
    dm = datamodule(dataset, True)
    order = np.concatenate([b.index.numpy() for b in dm._loader("id")])
    assert sorted(order.tolist()) == list(range(N_MOLECULES))
    assert (np.diff(dataset.atom_counts[order]) >= 0).all()
    unsorted = np.concatenate([b.index.numpy() for b in datamodule(dataset, False)._loader("id")])
    np.testing.assert_array_equal(unsorted, np.arange(N_MOLECULES))


def test_off_by_default_and_refused_for_molecules_without_atoms(dataset):
    dm = MoleculeDataModule(None, None, None, PointCloudFeatures(), ".")
    assert dm.group_by_size is False
    flat = SimpleNamespace()  # a descriptor set: no atoms, no token lengths
    grouped = datamodule(flat, True, features=VectorFeatures(standardize=False))
    with pytest.raises(ValueError, match="group_by_size needs molecules with atoms"):
        grouped.train_dataloader()


@pytest.mark.parametrize("group_by_size", [True, False])
def test_the_memory_planner_sizes_the_batches_the_loader_draws(dataset, group_by_size):
    """`training_orders` (what the memory planner sizes) cut into batches is, epoch by
    epoch, what the training loader draws, grouped or not."""
    dm = datamodule(dataset, group_by_size)
    orders = list(dm.training_orders(BATCH, epochs=2))
    assert len(orders) == 2
    for number, order in enumerate(orders):
        cut = [order[start : start + BATCH] for start in range(0, len(order), BATCH)]
        drawn = epoch(dm, number)
        assert [b.tolist() for b in cut] == [b.tolist() for b in drawn]


@pytest.mark.parametrize("group_by_size", [True, False])
def test_weighted_draws_are_what_the_memory_planner_sizes(dataset, group_by_size):
    """With training weights (`weighting=tails`) the loader draws by them, grouped or not,
    and the memory planner sizes those very batches."""
    dm = datamodule(dataset, group_by_size)
    dm.train_weights = np.where(np.arange(len(dataset)) % 2 == 0, 0.0, 2.0)
    order = next(dm.training_orders(BATCH, epochs=1))
    drawn = epoch(dm, 0)
    assert np.concatenate(drawn).tolist() == order.tolist()
    assert (order % 2 == 1).all() and len(order) == len(dataset)
