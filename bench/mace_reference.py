"""Our MACE against mace-torch 0.3.16 on the same batches of `csd10k_density` training
molecules, with identical weights, in float64 (BOOM's precision): training molecules per
second (forward, per-atom loss, backward, Adam step) and peak memory, each side in its own
process. Runs in the side environment that has mace-torch:

    make bench-mace ARGS="--batch-size 8 --batches 4 --threads 1"
    # i.e. .venv-mace/bin/python -m bench.mace_reference [--batch-size 8] [--batches 4]
    #          [--repeats 1] [--threads 1]

(with OODMOL_SOURCE_DIR set where the data must come from an offline copy).

Ours searches neighbours inside its forward pass (timed); mace's neighbour lists are
built by its data pipeline, here before the clock starts, so the comparison is
conservative for ours. The last line is
``model=mace reference_ratio=<ours/reference> ceiling_ratio=<...>`` (bench.harness).

The reference, mace-torch's MACE built as `mace_run_train --model MACE` builds it (BOOM's
runs) with the weights of one of our `MACE` backbones, and our point-cloud batches in its
input format (`reference_model`, `reference_inputs`), is also what
tests/test_mace_equivalence.py checks ours against. Building it imports mace, which turns
off torch's safe loading for the process: only in the side environment (`make mace-env`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from e3nn import o3

from bench import harness
from oodmol.data.batches import PointCloudBatch
from oodmol.models.backbones.mace import MACE
from oodmol.models.neighbors import radius_graph


def reference_model(ours: MACE, atomic_numbers: list[int], avg_num_neighbors: float):
    """ScaleShiftMACE with our sizes (read off `ours`), scale 1, shift 0 and zero E0s
    (those are the regressor's head and prior), and `ours`'s weights."""
    from mace import modules

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


def setup(args, name: str) -> tuple:
    """The config and training statistics of `model=mace` on csd10k_density and
    `--batches` + 1 batches of its training molecules in a fixed random order (the first
    is the warm-up), in float64."""
    from oodmol.config import compose_config
    from oodmol.training.build import build_datamodule, training_statistics

    torch.set_default_dtype(torch.float64)
    cfg = compose_config(
        "train", ["model=mace", "task=csd10k_density", "split=ood", "progress=false"]
    )
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    dataset = dm.datasets["train"]
    order = np.random.default_rng(0).permutation(len(dataset))
    batches = []
    for k in range(args.batches + 1):
        idx = order[k * args.batch_size : (k + 1) * args.batch_size].tolist()
        batch = dm.features.collate(dataset.__getitems__(idx))
        batches.append(replace(batch, pos=batch.pos.double(), y=batch.y.double()))
    return cfg, training_statistics(cfg, dm), batches


def build(args, name: str, side: str, shared: tuple) -> harness.Side:
    """Ours or mace's model with our weights, a training step on the per-atom energy's
    squared error with Adam (amsgrad, as mace trains)."""
    from torch_geometric.utils import scatter

    from oodmol.training.build import build_model

    cfg, statistics, batches = shared
    module = build_model(cfg, statistics).double()
    ours = module.backbone
    elements = statistics["backbone.atomic_numbers"]
    if side == "ours":
        model = module
        inputs = batches

        def loss_of(batch):
            energies, segment = ours(batch)
            energy = scatter(energies.squeeze(-1), segment, dim=0, dim_size=len(batch))
            atoms = torch.bincount(segment, minlength=len(batch))
            return torch.mean(((energy - batch.y) / atoms) ** 2)

    else:
        model = reference_model(ours, elements, statistics["backbone.avg_num_neighbors"])
        del module, ours
        r_max = cfg.model.module.backbone.r_max
        inputs = [(reference_inputs(b, elements, r_max), b) for b in batches]

        def loss_of(pair):
            data, batch = pair
            energy = model(data, training=True, compute_force=False)["energy"]
            atoms = torch.bincount(batch.molecule, minlength=len(batch))
            return torch.mean(((energy - batch.y) / atoms) ** 2)

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
    train = harness.optimiser_step(optimizer, lambda k: loss_of(inputs[k]))
    params = sum(p.numel() for p in model.parameters())
    return harness.Side(model, batches, train, figures={"params": params})


BENCH = harness.Reference(
    module="bench.mace_reference",
    doc=__doc__,
    models=("mace",),
    setup=setup,
    build=build,
    columns=(
        harness.side_column(),
        harness.first_column("params", "params", ""),
        harness.first_column("atoms/batch", "atoms_per_batch", ".1f"),
        harness.median_column("train mol/s", "train_mol_s", ".3f"),
        harness.median_column("s/step", "step_ms", ".2f", scale=1e-3),
        harness.peak_column(),
    ),
    batch_size=8,  # BOOM's, on the 10k set
    batches=4,
    repeats=1,
    molecules="csd10k_density training molecules, float64",
)

if __name__ == "__main__":
    harness.main(BENCH)
