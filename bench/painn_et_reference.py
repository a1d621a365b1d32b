"""Train our `model=painn` and `model=et` and their reference implementations, schnetpack
2.1.1's `representation.PaiNN` and torchmd-net 3.1.0's `TorchMD_ET`, side by side on the
same batches of `csd10k_density` training molecules, with the same weights and sizes (the
published models of configs/model/), optimiser and torch threads.

    python -m bench.painn_et_reference [--models painn,et] [--threads 1] [--batch-size 32]
        [--batches 3] [--repeats 2] [--compile]

Both packages need their own environment (`make painn-et-env`; `make bench-painn-et`).
Only the representation differs between the two sides: the reference is given our
weights (`schnetpack_state_dict`, `torchmdnet_state_dict`) and our neighbour list (each
side searches it, with our search: schnetpack leaves the search to its data pipeline, and
torchmd-net's is NVIDIA Warp's), and both go on through our output MLP, readout, head,
loss and optimiser. Each model is timed in its own process (so its peak memory is its
own), ours and the reference alternating `--repeats` times so that a change in the
machine's load hits both alike: one warm-up batch, then `--batches` training steps
(forward, loss, backward, optimiser step) and `--batches` forward passes without
gradients. Peak MB is the process's peak resident memory minus its resident memory before
the model was built. The last line per model is
``model=<name> reference_ratio=<ours/reference> ceiling_ratio=<...>``: the ratio of
training molecules per second, and the largest reference_ratio our FLOPs allow (the
reference's step time over our step's FLOPs at the measured matmul peak of its typical
shape, bench/flops.py's `matmul_floor_ms`). `--compile` adds a third side, ours with
`compile_backbone` (torch.compile; its compilation falls in the warm-up batches), and
``compiled_ratio=<ours compiled/reference>``; the reference runs as published, eager.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import torch
from torch import nn

from bench import harness


def schnetpack() -> types.SimpleNamespace:
    """schnetpack's `nn`, `properties` and `representation`, imported without running the
    package's __init__: that imports its data loaders, which import `T_co` from
    torch.utils.data.dataloader, gone in torch 2.13; the representation never uses them."""
    if "schnetpack" not in sys.modules:
        spec = importlib.util.find_spec("schnetpack")
        package = types.ModuleType("schnetpack")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["schnetpack"] = package
    nn_module = importlib.import_module("schnetpack.nn")
    properties = importlib.import_module("schnetpack.properties")
    representation = importlib.import_module("schnetpack.representation")
    return types.SimpleNamespace(nn=nn_module, properties=properties, representation=representation)


def schnetpack_painn(backbone) -> nn.Module:
    """schnetpack's PaiNN with our backbone's sizes and weights."""
    from oodmol.models.backbones.painn import schnetpack_state_dict

    spk = schnetpack()
    reference = spk.representation.PaiNN(
        n_atom_basis=backbone.hidden,
        n_interactions=len(backbone.messages),
        radial_basis=spk.nn.BesselRBF(
            n_rbf=backbone.rbf.frequencies.numel(), cutoff=backbone.cutoff
        ),
        cutoff_fn=spk.nn.CosineCutoff(backbone.cutoff),
    ).to(backbone.embedding.weight.dtype)
    missing, unexpected = reference.load_state_dict(schnetpack_state_dict(backbone), strict=False)
    assert not unexpected and set(missing) <= {"radial_basis.freqs", "cutoff_fn.cutoff"}
    return reference


def schnetpack_embed(reference: nn.Module, backbone, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """schnetpack's scalar [N, F] and vector [N, 3, F] features on our neighbour list."""
    properties = schnetpack().properties
    j, i = backbone.distance(batch.pos, batch.molecule).index
    out = reference(
        {
            properties.Z: batch.z,
            properties.Rij: batch.pos[j] - batch.pos[i],
            properties.idx_i: i,
            properties.idx_j: j,
        }
    )
    return out["scalar_representation"], out["vector_representation"]


class OurSearch(nn.Module):
    """Our neighbour search (self-loops included) in torchmd-net's `OptimizedDistance`
    interface: edge index, lengths and vectors r_j − r_i."""

    def __init__(self, backbone) -> None:
        super().__init__()
        self.search = backbone.distance

    def forward(self, pos, batch, box=None):
        edges = self.search(pos, batch)
        return edges.index, edges.length, edges.vector


def torchmdnet_et(backbone) -> nn.Module:
    """torchmd-net's ET with our backbone's sizes, weights and neighbour search."""
    from torchmdnet.models.torchmd_et import TorchMD_ET

    from oodmol.models.backbones.et import torchmdnet_state_dict

    reference = TorchMD_ET(
        hidden_channels=backbone.hidden,
        num_layers=len(backbone.layers),
        num_rbf=backbone.rbf.means.numel(),
        rbf_type="expnorm",
        trainable_rbf=isinstance(backbone.rbf.means, nn.Parameter),
        neighbor_embedding=backbone.neighbor_embedding is not None,
        num_heads=backbone.layers[0].heads,
        cutoff_upper=backbone.cutoff,
        max_num_neighbors=backbone.max_neighbors,
        dtype=backbone.embedding.weight.dtype,
    ).to(backbone.embedding.weight.dtype)  # its radial basis ignores `dtype`
    reference.distance = OurSearch(backbone)
    reference.load_state_dict(torchmdnet_state_dict(backbone))
    return reference


def torchmdnet_embed(reference: nn.Module, backbone, batch) -> tuple[torch.Tensor, torch.Tensor]:
    x, vec, *_ = reference(batch.z, batch.pos, batch.molecule)
    return x, vec


REFERENCES = {
    "painn": (schnetpack_painn, schnetpack_embed),
    "et": (torchmdnet_et, torchmdnet_embed),
}


def build(args, name: str, side: str, shared: tuple) -> harness.Side:
    """Our model; for the reference, the same model with the reference's representation
    (holding our weights) in place of our backbone's; `compiled`: ours compiled."""
    from oodmol.training.build import build_model, training_statistics

    cfg, dm, batches = shared
    model = build_model(cfg, training_statistics(cfg, dm))
    model.fit_target_scaling(dm.train_targets)
    backbone = model.backbone
    if side == "reference":
        make, embed = REFERENCES[name]
        reference = make(backbone)
        for child in list(backbone.named_children()):
            if child[0] not in ("output", "distance"):
                delattr(backbone, child[0])  # only the reference's weights are trained
        backbone.reference = reference
        backbone.embed = lambda batch: embed(reference, backbone, batch)
    model.compile_backbone = side == "compiled"
    step = harness.training_step(model, model.optimizer_factory(model.parameters()))
    return harness.Side(
        model, batches, lambda k: step(batches[k]), infer=lambda k: model(batches[k])
    )


BENCH = harness.Reference(
    module="bench.painn_et_reference",
    doc=__doc__,
    models=("painn", "et"),
    build=build,
    columns=(
        harness.model_column(),
        harness.side_column(),
        harness.median_column("train mol/s", "train_mol_s", ".2f"),
        harness.median_column("infer mol/s", "infer_mol_s", ".2f"),
        harness.median_column("step ms", "step_ms", ".0f"),
        harness.peak_column(),
    ),
    batches=3,
    sides=lambda args: ("ours", "compiled", "reference") if args.compile else ("ours", "reference"),
    add_options=lambda parser: parser.add_argument(
        "--compile", action="store_true", help="also ours compiled"
    ),
)

if __name__ == "__main__":
    harness.main(BENCH)
