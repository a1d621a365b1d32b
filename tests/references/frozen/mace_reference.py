"""mace-torch 0.3.16's MACE built as `mace_run_train --model MACE` builds it (BOOM's
runs), with the weights of one of our `MACE` backbones, and our point-cloud batches in
its input format: the reference of `test_mace_equivalence.py` and
`bench/mace_reference.py`. Importing it imports mace, which turns off torch's safe
loading for the process: only in the side environment (`make mace-env`)."""

from __future__ import annotations

import numpy as np
import torch
from e3nn import o3
from mace import modules

from oodmol.data.batches import PointCloudBatch
from oodmol.models.backbones.mace import MACE
from oodmol.models.neighbors import radius_graph


def reference_model(ours: MACE, atomic_numbers: list[int], avg_num_neighbors: float):
    """ScaleShiftMACE with our sizes (read off `ours`), scale 1, shift 0 and zero E0s
    (those are the regressor's head and prior), and `ours`'s weights."""
    first_interaction = ours.interactions[0]
    theirs = modules.ScaleShiftMACE(
        r_max=ours.r_max,
        num_bessel=ours.radial_embedding.out_dim,
        num_polynomial_cutoff=ours.radial_embedding.cutoff_fn.p,
        max_ell=ours.spherical_harmonics.irreps_out.lmax,
        interaction_cls=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=modules.interaction_classes["RealAgnosticInteractionBlock"],
        num_interactions=len(ours.interactions),
        num_elements=len(atomic_numbers),
        hidden_irreps=ours.hidden_irreps[0],
        MLP_irreps=mlp_irreps(ours),
        atomic_energies=np.zeros(len(atomic_numbers)),
        avg_num_neighbors=avg_num_neighbors,
        atomic_numbers=atomic_numbers,
        correlation=ours.products[0].symmetric_contractions.contractions[0].correlation,
        gate=torch.nn.functional.silu,
        radial_MLP=[layer.weight.shape[1] for layer in first_interaction.conv_tp_weights][:-1],
        atomic_inter_scale=1.0,
        atomic_inter_shift=0.0,
        use_reduced_cg=False,
    )
    missing, _ = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not [k for k in missing if k in dict(theirs.named_parameters())], missing
    return theirs


def mlp_irreps(ours: MACE) -> o3.Irreps:
    """The hidden irreps of the last readout (unused by mace with one layer)."""
    last = ours.readouts[-1]
    return last.linear_1.irreps_out if hasattr(last, "linear_1") else o3.Irreps("16x0e")


def reference_inputs(batch: PointCloudBatch, atomic_numbers: list[int], r_max: float) -> dict:
    """mace's data dictionary of a batch (our radius graph; no periodic cell)."""
    column = {z: i for i, z in enumerate(atomic_numbers)}
    elements = torch.tensor([column[int(z)] for z in batch.z])
    edge_index = radius_graph(batch.pos, batch.molecule, r_max, None, False)
    counts = torch.bincount(batch.molecule, minlength=len(batch))
    return {
        "node_attrs": torch.nn.functional.one_hot(elements, len(atomic_numbers)).to(
            batch.pos.dtype
        ),
        "positions": batch.pos.clone(),
        "edge_index": edge_index,
        "shifts": batch.pos.new_zeros(edge_index.shape[1], 3),
        "batch": batch.molecule,
        "ptr": torch.cat([counts.new_zeros(1), counts.cumsum(0)]),
        "cell": batch.pos.new_zeros(len(batch), 3, 3),
    }
