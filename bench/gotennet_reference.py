"""Train our `model=gotennet` and the authors' `gotennet` package (1.1.2) side by side on
the same batches of `csd10k_density` training molecules, with the same weights, sizes
(upstream's QM9 model, as configs/model/gotennet.yaml), optimiser and torch threads.

    python -m bench.gotennet_reference [--threads 1] [--batch-size 32] [--batches 6]
        [--repeats 2]

gotennet needs torch-cluster and torch-scatter, so run it where `make gotennet-env` put
it (`make bench-gotennet`). Each model is timed in its own process (so its peak memory
is its own), the two alternating `--repeats` times so that a change in the machine's
load hits both alike: one warm-up batch, then `--batches` training steps (forward, MSE
loss, backward, AdamW step), in training mode (attention dropout on) and each with its
own neighbour search: ours, and upstream's radius_graph (here the pure-torch stand-in
for torch-cluster), whose time is also printed apart. Peak MB is the process's peak
resident memory minus its resident memory before the model was built. The last line is
``model=gotennet reference_ratio=<ours/reference> ceiling_ratio=<...>``: the ratio of
training molecules per second, and the largest reference_ratio our FLOPs allow (the
reference's step time over our step's FLOPs at the measured matmul peak of its typical
shape, bench/flops.py's `matmul_floor_ms`); the protocol is `bench.harness`'s.
"""

from __future__ import annotations

import torch

from bench import harness


def reference_model(ours, extensive: bool):
    """Upstream's GotenNetWrapper and Atomwise head with our model's sizes and weights."""
    from gotennet import GotenNetWrapper
    from gotennet.models.components.layers import CosineCutoff
    from gotennet.models.components.outputs import Atomwise

    backbone = ours.backbone
    gata = backbone.gata_list[0]
    representation = GotenNetWrapper(
        max_num_neighbors=backbone.max_neighbors,
        n_atom_basis=backbone.hidden,
        n_interactions=len(backbone.gata_list),
        radial_basis="expnorm",
        n_rbf=backbone.radial_basis.means.numel(),
        cutoff_fn=CosineCutoff(backbone.cutoff),
        activation="swish",
        num_heads=gata.heads,
        attn_dropout=gata.dropout,
        edge_updates=True,
        lmax=gata.lmax,
        scale_edge=False,
        sep_htr=True,
        sep_dir=True,
        sep_tensor=True,
    )
    state = {k: v for k, v in backbone.state_dict().items() if not k.startswith("output.")}
    missing, unexpected = representation.load_state_dict(state, strict=False)
    assert not unexpected and all(".layers." in k for k in missing), (missing, unexpected)
    head = Atomwise(
        n_in=backbone.hidden,
        n_hidden=backbone.output.out_dim,
        activation=torch.nn.functional.silu,
        aggregation_mode="sum" if extensive else "mean",
    )
    first, last = head.out_net[1].out_net
    first.load_state_dict(backbone.output.mlp[0].state_dict())
    last.load_state_dict(ours.head.net[0].state_dict())
    return representation, head


def build(args, name: str, side: str, shared: tuple) -> harness.Side:
    """Ours, or upstream's representation and head with our weights: a training step on
    MSE of standardised targets with AdamW, and each side's own neighbour search."""
    from oodmol.training.build import build_model, training_statistics

    cfg, dm, batches = shared
    ours = build_model(cfg, training_statistics(cfg, dm))
    ours.fit_target_scaling(dm.train_targets)
    targets = [(b.y - ours.y_mean) / ours.y_std for b in batches]
    if side == "ours":
        model, forward = ours, ours
        search = ours.backbone.distance
    else:
        representation, head = reference_model(ours, cfg.task.extensive)
        del ours
        model = torch.nn.ModuleList([representation, head])

        from torch_geometric.data import Data

        def forward(batch):
            inputs = Data(z=batch.z, pos=batch.pos, batch=batch.molecule)
            inputs.representation, _ = representation(inputs)
            return head(inputs)["y"].squeeze(-1)

        search = representation.distance
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-7, weight_decay=0.0)
    mse = torch.nn.functional.mse_loss
    train = harness.optimiser_step(optimizer, lambda k: mse(forward(batches[k]), targets[k]))

    return harness.Side(
        model, batches, train, search=lambda k: search(batches[k].pos, batches[k].molecule)
    )


BENCH = harness.Reference(
    module="bench.gotennet_reference",
    doc=__doc__,
    models=("gotennet",),
    build=build,
    columns=(
        harness.side_column("model"),
        harness.median_column("train mol/s", "train_mol_s", ".2f"),
        harness.median_column("step ms", "step_ms", ".0f"),
        harness.median_column("neighbour search ms", "search_ms", ".1f"),
        harness.peak_column(),
    ),
    batches=6,
)

if __name__ == "__main__":
    harness.main(BENCH)
