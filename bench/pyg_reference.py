"""Our SchNet, DimeNet++ and ViSNet against PyTorch Geometric's own models with the same
weights, sizes (configs/model/<name>.yaml), batches of `csd10k_density` training
molecules, optimiser and torch threads.

    python -m bench.pyg_reference [--models schnet,dimenetpp,visnet] [--threads 1]
        [--batch-size 32] [--batches 4] [--repeats 2]

Each model is timed in its own process, ours and PyG's alternating `--repeats` times so
that a change in the machine's load hits both alike: one warm-up batch, then `--batches`
training steps (forward, MSE on standardised targets, backward, the config's optimiser
step) in training mode, then the same batches' inference (no gradients, eval mode).

The reference is PyG's forward on PyG's modules holding our weights. PyG's neighbour
search needs torch-cluster (and DimeNet++'s triplets torch-sparse), absent here, so
both sides search with `oodmol.models.neighbors.radius_graph` (the tests give PyG the
same); that search is timed apart and printed for both. Our last Linear(s) (the shared
head) become PyG's output Linear(s), and PyG's readout sums or averages as the task does
(DimeNet++'s always sums, through its output blocks' own Linears). DimeNet++'s
reference derives its spherical basis with sympy in the constructor (about 20–40 s at the
configured 7 × 6 functions, in PyG's processes of this bench; ours computes it
numerically).

Rates (molecules per second) and step times are per CPU second of the process
(`time.process_time`): on a shared machine the wall clock also counts other processes'
turns on the cores, which CPU time does not; with one thread it is the model's own work.
The wall-clock training rate is printed beside it. Peak MB is the process's peak
resident memory minus its resident memory before the model was built. The last lines
are ``model=<name> reference_ratio=<ours/PyG> wall_ratio=<...> ceiling_ratio=<...>``: the
ratios of training molecules per CPU second and per wall-clock second, and the largest
reference_ratio our FLOPs allow (PyG's step time over our step's FLOPs at the measured
matmul peak of its typical shape, bench/flops.py's `matmul_floor_ms`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from bench import harness

MODELS = ("schnet", "dimenetpp", "visnet")


def pyg_schnet(ours, mean: bool) -> tuple[torch.nn.Module, Callable]:
    from torch_geometric.nn.models import schnet

    backbone = ours.backbone
    model = schnet.SchNet(
        backbone.hidden_channels,
        backbone.num_filters,
        backbone.num_interactions,
        backbone.num_gaussians,
        backbone.cutoff,
        interaction_graph=backbone.interaction_graph,
        readout="mean" if mean else "add",
    )
    head = ours.head.net[0]
    model.load_state_dict(
        {**backbone.state_dict(), "lin2.weight": head.weight, "lin2.bias": head.bias}
    )
    return model, lambda b: model(b.z, b.pos, b.molecule).squeeze(-1)


def pyg_dimenetpp(ours, mean: bool) -> tuple[torch.nn.Module, Callable]:
    from torch_geometric.nn.models import dimenet

    from oodmol.models.backbones.dimenetpp import triplets
    from oodmol.models.neighbors import radius_graph

    def pyg_triplets(edge_index, num_nodes):
        idx_kj, idx_ji, idx_k, idx_i = triplets(edge_index, num_nodes)
        row, col = edge_index
        return col, row, idx_i, row[idx_ji], idx_k, idx_kj, idx_ji

    dimenet.radius_graph = lambda pos, r, batch, max_num_neighbors: radius_graph(
        pos, batch, r, max_num_neighbors
    )
    dimenet.triplets = pyg_triplets
    backbone = ours.backbone
    interaction, output = backbone.interaction_blocks[0], backbone.output_blocks[0]
    model = dimenet.DimeNetPlusPlus(
        hidden_channels=backbone.emb.emb.embedding_dim,
        out_channels=1,
        num_blocks=len(backbone.interaction_blocks),
        int_emb_size=interaction.lin_down.out_features,
        basis_emb_size=interaction.lin_rbf1.out_features,
        out_emb_channels=output.lin_up.out_features,
        num_spherical=backbone.sbf.num_spherical,
        num_radial=backbone.sbf.num_radial,
        cutoff=backbone.cutoff,
        max_num_neighbors=backbone.max_num_neighbors,
        envelope_exponent=backbone.sbf.envelope.p - 1,
        num_before_skip=len(interaction.layers_before_skip),
        num_after_skip=len(interaction.layers_after_skip),
        num_output_layers=len(output.lins),
    )
    weight = ours.head.net[0].weight.detach()
    width = weight.shape[1] // len(backbone.output_blocks)
    finals = {f"output_blocks.{b}.lin.weight": w for b, w in enumerate(weight.split(width, dim=1))}
    model.load_state_dict({**backbone.state_dict(), **finals})
    return model, lambda b: model(b.z, b.pos, b.molecule).squeeze(-1)


def pyg_visnet(ours, mean: bool) -> tuple[torch.nn.Module, Callable]:
    from torch_geometric.nn.models import visnet

    from oodmol.models.backbones.visnet import Distance

    backbone = ours.backbone
    block = backbone.representation
    model = visnet.ViSNet(
        lmax=block.lmax,
        vecnorm_type=block.vecnorm_type,
        trainable_vecnorm=block.trainable_vecnorm,
        num_heads=block.num_heads,
        num_layers=block.num_layers,
        hidden_channels=block.hidden_channels,
        num_rbf=block.num_rbf,
        trainable_rbf=block.trainable_rbf,
        max_z=block.max_z,
        cutoff=block.cutoff,
        max_num_neighbors=block.max_num_neighbors,
        reduce_op="mean" if mean else "sum",
    )
    model.representation_model.distance = Distance(block.cutoff, block.max_num_neighbors)
    state = model.state_dict()
    state.update({f"representation_model.{k}": v for k, v in block.state_dict().items()})
    state.update(
        {f"output_model.output_network.0.{k}": v for k, v in backbone.gated.state_dict().items()}
    )
    last = "output_model.output_network.1"
    head = ours.head.net[0]
    state[f"{last}.vec1_proj.weight"] = backbone.vec_proj.weight
    state[f"{last}.update_net.0.weight"] = backbone.lin.weight
    state[f"{last}.update_net.0.bias"] = backbone.lin.bias
    state[f"{last}.update_net.2.weight"][0] = head.weight[0]
    state[f"{last}.update_net.2.bias"][0] = head.bias[0]
    model.load_state_dict(state)
    return model, lambda b: model(b.z, b.pos, b.molecule)[0].squeeze(-1)


REFERENCES = {"schnet": pyg_schnet, "dimenetpp": pyg_dimenetpp, "visnet": pyg_visnet}


def build(args, name: str, side: str, shared: tuple) -> harness.Side:
    """Our model, or PyG's holding its weights: a training step on MSE of standardised
    targets with the config's optimiser, the forward pass, and our neighbour search."""
    from oodmol.models.neighbors import radius_graph
    from oodmol.training.build import build_model, training_statistics

    cfg, dm, batches = shared
    built = time.perf_counter()
    ours = build_model(cfg, training_statistics(cfg, dm))
    build_seconds = time.perf_counter() - built
    ours.fit_target_scaling(dm.train_targets)
    targets = [(b.y - ours.y_mean) / ours.y_std for b in batches]
    optimizer_factory = ours.optimizer_factory
    if side == "ours":
        model, forward = ours, ours
    else:
        model, forward = REFERENCES[name](ours, mean=not cfg.task.extensive)
        del ours
    optimizer = optimizer_factory(model.parameters())
    mse = torch.nn.functional.mse_loss
    train = harness.optimiser_step(optimizer, lambda k: mse(forward(batches[k]), targets[k]))

    backbone = cfg.model.module.backbone
    cutoff, max_neighbors = float(backbone.cutoff), int(backbone.max_neighbors)
    return harness.Side(
        model,
        batches,
        train,
        infer=lambda k: forward(batches[k]),
        search=lambda k: radius_graph(batches[k].pos, batches[k].molecule, cutoff, max_neighbors),
        figures={"build_s": build_seconds},
    )


BENCH = harness.Reference(
    module="bench.pyg_reference",
    doc=__doc__,
    models=MODELS,
    build=build,
    columns=(
        harness.model_column(),
        harness.side_column("impl"),
        harness.first_column("atoms/batch", "atoms_per_batch", ".0f"),
        harness.median_column("train mol/s", "train_mol_s", ".2f"),
        harness.median_column("infer mol/s", "infer_mol_s", ".2f"),
        harness.median_column("step ms (CPU)", "step_ms", ".0f"),
        harness.median_column("wall train mol/s", "wall_train_mol_s", ".2f"),
        harness.median_column("search ms", "search_ms", ".1f"),
        harness.median_column("build s", "build_s", ".1f"),
        harness.peak_column(),
    ),
    batches=4,
    sides=lambda args: ("ours", "pyg"),
    clock="cpu",
)

if __name__ == "__main__":
    harness.main(BENCH)
