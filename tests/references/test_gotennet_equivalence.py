"""Our GotenNet against the authors' `gotennet` package (1.1.2) on identical weights, in
float64: atom features, predictions through upstream's Atomwise head, and gradients.

gotennet imports torch-cluster and torch-scatter, which have no wheels for torch 2.13 on
CPU, so it is not a dependency: these tests skip where it is absent. `make
test-gotennet-reference` builds `.venv-gotennet` (gotennet without its dependencies,
pure-torch stand-ins for those two: scripts/reference_standins/) and runs them there.
"""

from __future__ import annotations

import pytest
import torch
from geometry_helpers import in_double, point_cloud_batch
from torch_geometric.data import Data

from oodmol.data.batches import PointCloudBatch
from oodmol.models.backbones.gotennet import GotenNet, from_reference_state_dict
from oodmol.models.module import PropertyRegressor

gotennet = pytest.importorskip(
    "gotennet", reason="the reference needs `make gotennet-env` (.venv-gotennet)"
)
from gotennet.models.components.layers import CosineCutoff  # noqa: E402
from gotennet.models.components.outputs import Atomwise  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread", "float64")

# (hidden, layers, heads, lmax, num_rbf): upstream's QM9 model and two smaller ones. Not
# lmax 3: upstream's l = 3 components (TensorInit) are e3nn's recursion applied to its own
# normalised l = 2 ones, not e3nn's l = 3 harmonics (their norm is not 1), where ours are.
SIZES = [(256, 4, 8, 2, 64), (32, 3, 4, 2, 16), (16, 2, 2, 1, 8)]
ATOL = 1e-9  # float64: the code paths differ only in the order of floating-point operations


@pytest.fixture(scope="module")
def batch() -> PointCloudBatch:
    return in_double(point_cloud_batch())


def reference_kwargs(hidden: int, layers: int, heads: int, lmax: int, num_rbf: int) -> dict:
    """Upstream's configs/model/gotennet.yaml with the given sizes."""
    return dict(
        n_atom_basis=hidden,
        n_interactions=layers,
        radial_basis="expnorm",
        n_rbf=num_rbf,
        cutoff_fn=CosineCutoff(5.0),
        activation="swish",
        max_z=100,
        weight_init="xavier_uniform",
        bias_init="zeros",
        num_heads=heads,
        attn_dropout=0.1,
        edge_updates=True,
        lmax=lmax,
        aggr="add",
        scale_edge=False,
        sep_htr=True,
        sep_dir=True,
        sep_tensor=True,
        edge_ln="",
    )


def twins(
    sizes: tuple[int, ...], dropout: float = 0.1
) -> tuple[GotenNet, gotennet.GotenNetWrapper]:
    """Ours and upstream's representation with upstream's random weights in both."""
    hidden, layers, heads, lmax, num_rbf = sizes
    torch.manual_seed(0)
    theirs = gotennet.GotenNetWrapper(
        max_num_neighbors=32, **reference_kwargs(hidden, layers, heads, lmax, num_rbf)
    )
    for gata in theirs.gata_list:
        gata.dropout = dropout
    ours = GotenNet(hidden, layers, heads, lmax, num_rbf, 5.0, 32, dropout, output_hidden=8)
    state = from_reference_state_dict(theirs.state_dict())
    output = {k: v for k, v in ours.state_dict().items() if k.startswith("output.")}
    assert not set(state) & set(output)
    ours.load_state_dict(state | output, strict=True)  # every name maps, one to one
    return ours, theirs


@pytest.mark.parametrize("sizes", SIZES)
def test_atom_features_match_on_the_same_edges(batch, sizes):
    ours, theirs = twins(sizes)
    ours.eval(), theirs.eval()
    edges = ours.distance(batch.pos, batch.molecule)
    with torch.no_grad():
        h, X = ours.embed(batch)
        h_theirs, X_theirs = gotennet.GotenNet.forward(
            theirs, batch.z, edges.index, edges.length, edges.vector.clone()
        )
    assert X.shape == X_theirs.shape and X_theirs.abs().max() > 1e-3
    torch.testing.assert_close(h, h_theirs, atol=ATOL, rtol=0)
    torch.testing.assert_close(X, X_theirs, atol=ATOL, rtol=0)


def upstream_head(theirs: gotennet.GotenNetWrapper, ours: PropertyRegressor, mode: str):
    """Upstream's Atomwise output (per-atom MLP F → 8 → 1, `mode` over atoms) with our
    output MLP's and head's weights. The head's bias is set to 0 (upstream's initial
    value): ours adds it once per molecule after the readout, upstream's once per atom
    before it, the same for a mean, not for a sum."""
    ours.head.net[0].bias.data.zero_()
    head = Atomwise(
        n_in=theirs.hidden_dim,
        n_hidden=8,
        activation=torch.nn.functional.silu,
        aggregation_mode=mode,
        property="y",
    )
    first, last = head.out_net[1].out_net
    first.load_state_dict(ours.backbone.output.mlp[0].state_dict())
    last.load_state_dict(ours.head.net[0].state_dict())
    return head


@pytest.mark.parametrize("extensive,mode", [(True, "sum"), (False, "mean")])
def test_predictions_match_with_upstreams_neighbours_and_head(batch, extensive, mode):
    """The wrapper's radius graph (self-loops, at most 32 neighbours) is ours wherever
    fewer than 32 atoms lie within 5 Å, as in these molecules."""
    backbone, theirs = twins(SIZES[0])
    ours = PropertyRegressor(backbone, optimizer=torch.optim.Adam, extensive=extensive)
    head = upstream_head(theirs, ours, mode)
    ours.eval(), theirs.eval(), head.eval()
    inputs = Data(z=batch.z, pos=batch.pos, batch=batch.molecule)
    with torch.no_grad():
        inputs.representation, _ = theirs(inputs)
        expected = head(inputs)["y"].squeeze(-1)
        torch.testing.assert_close(ours(batch), expected, atol=ATOL, rtol=0)


def test_gradients_match_in_training_mode(batch):
    """Training steps are the same (attention dropout off: its random masks differ)."""
    backbone, theirs = twins(SIZES[1], dropout=0.0)
    ours = PropertyRegressor(backbone, optimizer=torch.optim.Adam, extensive=True)
    head = upstream_head(theirs, ours, "sum")
    ours.train(), theirs.train(), head.train()
    inputs = Data(z=batch.z, pos=batch.pos, batch=batch.molecule)
    inputs.representation, _ = theirs(inputs)
    (head(inputs)["y"].squeeze(-1) ** 2).sum().backward()
    (ours(batch) ** 2).sum().backward()
    theirs_grads = {k: p.grad for k, p in theirs.named_parameters()}
    for name, parameter in ours.backbone.named_parameters():
        if not name.startswith("output."):
            torch.testing.assert_close(parameter.grad, theirs_grads[name], atol=ATOL, rtol=0)
    torch.testing.assert_close(
        ours.head.net[0].weight.grad, head.out_net[1].out_net[1].weight.grad, atol=ATOL, rtol=0
    )
