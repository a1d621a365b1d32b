"""The atom-reference prior of PropertyRegressor: fixed per-element offsets added to the
prediction in the property's units, the network trained on what they leave, and the
per-atom loss (MACE's energy loss)."""

from __future__ import annotations

import pytest
import torch
from geometry_helpers import point_cloud_batch
from torch import nn

from oodmol.data.batches import PointCloudBatch, VectorBatch
from oodmol.models.module import PropertyRegressor, atom_counts
from oodmol.models.prior import AtomReference
from oodmol.uq.likelihood import GaussianLikelihood

OFFSETS = {"1": -0.5, "6": 2.0, "7": 3.0, "8": 5.0}
REFERENCE = {"offsets": OFFSETS, "residual_mean": 0.25, "residual_std": 2.0}


class ZeroPerAtom(nn.Module):
    """A backbone that predicts 0 for every atom: the prediction is the prior alone."""

    out_dim = 1

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.unused * torch.zeros(len(batch.z), 1), batch.molecule


def expected_prior(batch: PointCloudBatch) -> torch.Tensor:
    per_atom = torch.tensor([OFFSETS[str(int(z))] for z in batch.z])
    return torch.zeros(len(batch)).index_add_(0, batch.molecule, per_atom)


def regressor(**kwargs) -> PropertyRegressor:
    model = PropertyRegressor(ZeroPerAtom(), optimizer=torch.optim.Adam, extensive=True, **kwargs)
    nn.init.zeros_(model.head.net[-1].weight)
    nn.init.zeros_(model.head.net[-1].bias)
    return model


def test_the_prior_sums_each_molecules_offsets():
    batch = point_cloud_batch()
    torch.testing.assert_close(AtomReference(OFFSETS)(batch), expected_prior(batch))
    with pytest.raises(TypeError, match="point clouds"):
        AtomReference(OFFSETS)(VectorBatch(index=torch.arange(1), x=torch.zeros(1, 3)))
    with pytest.raises(ValueError, match="atomic number 0"):
        AtomReference({"0": 1.0})


def test_predictions_add_the_prior_and_targets_are_scaled_by_what_it_leaves():
    batch = point_cloud_batch()
    model = regressor(atom_reference=REFERENCE)
    model.fit_target_scaling(torch.randn(10) * 100)  # the raw targets' spread is not used
    assert model.y_mean.item() == 0.25 and model.y_std.item() == 2.0
    # a zero network predicts the prior plus the remainder's mean
    torch.testing.assert_close(model.predict_batch(batch).mean, expected_prior(batch) + 0.25)
    # and is scored on the standardised remainder: y = prior + 0.25 + 2·1 gives loss 1
    batch = PointCloudBatch(
        index=batch.index,
        y=expected_prior(batch) + 2.25,
        z=batch.z,
        pos=batch.pos,
        molecule=batch.molecule,
    )
    model.log = lambda *args, **kwargs: None
    assert model.training_step(batch, 0).item() == pytest.approx(1.0)


def test_without_a_prior_the_targets_own_statistics_are_used():
    model = regressor()
    model.fit_target_scaling(torch.tensor([1.0, 3.0]))
    assert model.y_mean.item() == 2.0 and model.prior is None


def test_the_per_atom_loss_divides_each_molecules_error_by_its_atoms():
    batch = point_cloud_batch()
    atoms = atom_counts(batch).double()
    y = torch.full((len(batch),), 3.0)
    batch = PointCloudBatch(
        index=batch.index, y=y, z=batch.z, pos=batch.pos, molecule=batch.molecule
    )
    model = regressor(per_atom_loss=True)
    model.log = lambda *args, **kwargs: None
    expected = torch.mean((3.0 / atoms) ** 2).item()  # y_mean 0, y_std 1, prediction 0
    assert model.training_step(batch, 0).item() == pytest.approx(expected)
    with pytest.raises(ValueError, match="point head"):
        PropertyRegressor(
            ZeroPerAtom(),
            optimizer=torch.optim.Adam,
            per_atom_loss=True,
            likelihood=GaussianLikelihood(),
        )
