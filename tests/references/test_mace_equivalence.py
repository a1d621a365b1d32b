"""Our MACE against mace-torch 0.3.16 itself, with identical weights, in float64.

mace-torch pins e3nn==0.4.4, whose import fails under torch 2.13, and its `import mace`
turns off torch's safe loading for the whole process, so it is not a dependency: these
tests skip where mace is absent. `make test-mace-reference` builds the side environment
(`make mace-env`: mace-torch --no-deps beside e3nn 0.6) and runs them there.
"""

from __future__ import annotations

import pytest
import torch
from geometry_helpers import in_double, point_cloud_batch

from oodmol.models.backbones.mace import MACE

pytest.importorskip("mace", reason="mace-torch is not installed (make test-mace-reference)")
from torch_geometric.utils import scatter

from bench.mace_reference import reference_inputs, reference_model

pytestmark = pytest.mark.usefixtures("one_thread")

ELEMENTS = [1, 6, 7, 8]
SIZES = {
    "booms_layout": {"num_channels": 8},
    "one_interaction": {"num_channels": 8, "num_interactions": 1},
    "three_interactions_correlation_3": {
        "num_channels": 4,
        "num_interactions": 3,
        "correlation": 3,
        "max_L": 1,
        "max_ell": 2,
    },
}


@pytest.mark.parametrize("sizes", list(SIZES))
def test_energies_and_features_match_mace_torch(float64, sizes):
    torch.manual_seed(0)
    ours = MACE(ELEMENTS, 6.3, **SIZES[sizes]).eval()
    theirs = reference_model(ours, ELEMENTS, 6.3).eval()
    batch = in_double(point_cloud_batch())
    out = theirs(reference_inputs(batch, ELEMENTS, ours.r_max), compute_force=False)
    energies, segment = ours(batch)
    ours_energy = scatter(energies.squeeze(-1), segment, dim=0, dim_size=len(batch))
    assert out["energy"].abs().max() > 1e-3  # not trivially zero
    torch.testing.assert_close(ours_energy, out["energy"], atol=1e-10, rtol=1e-9)
    features = torch.cat(ours.node_features(batch), dim=-1)
    torch.testing.assert_close(features, out["node_feats"], atol=1e-10, rtol=1e-9)


def test_parameters_are_mace_torchs_one_to_one_at_booms_size(float64):
    ours = MACE([1, 6, 7, 8, 9], 10.0)  # QM9's elements, BOOM's sizes (the defaults)
    theirs = reference_model(ours, [1, 6, 7, 8, 9], 10.0)
    ours_shapes = {k: v.shape for k, v in ours.named_parameters()}
    theirs_shapes = {k: v.shape for k, v in theirs.named_parameters()}
    assert ours_shapes == theirs_shapes
    assert sum(p.numel() for p in theirs.parameters()) == sum(p.numel() for p in ours.parameters())


def test_coupling_matrices_are_mace_torchs(float64):
    ours = MACE(ELEMENTS, 5.0, num_channels=4, correlation=3)
    theirs = reference_model(ours, ELEMENTS, 5.0)
    buffers = dict(theirs.named_buffers())
    compared = 0
    for name, u in ours.named_buffers():
        if ".U_matrix_" in name:
            torch.testing.assert_close(u, buffers[name], atol=1e-12, rtol=0)
            compared += 1
    assert compared == 3 * 3 + 1 * 3  # 3 output irreps, then scalars only; ν = 1, 2, 3
