"""Graphormer-3D (BOOM's): symmetries, the full graph against BOOM's 32-neighbour
truncation, equality of the padded attention with BOOM's edge-list formulation, training
steps and its Hydra config (sizes, EMA)."""

from __future__ import annotations

import inspect
import math
from functools import partial

import pytest
import torch
from fit_helpers import training_losses
from geometry_helpers import assert_invariant, in_double, point_cloud_batch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from paths import REPO
from torch_geometric.utils import scatter

from oodmol.data.batches import PointCloudBatch
from oodmol.models.backbones.graphormer3d import Graphormer3D, NodeAttention
from oodmol.models.module import PropertyRegressor
from oodmol.training.averaging import EMA

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = REPO / "configs"
TINY = {"node_dim": 16, "ff_dim": 24, "edge_dim": 8, "num_convs": 2, "num_heads": 4}
DODECANE = "CCCCCCCCCCCC"  # 38 atoms with hydrogens: truncated at 32 neighbours
SMALL = ["CC(=O)O", "c1ccccc1O", "OCCN"]  # at most 33 atoms: never truncated


@pytest.fixture(scope="module")
def batch() -> PointCloudBatch:
    return point_cloud_batch()


def tiny(**kw) -> Graphormer3D:
    torch.manual_seed(0)
    return Graphormer3D(**TINY, **kw)


@pytest.mark.parametrize("max_neighbors", [None, 32, 3])
@pytest.mark.parametrize("extensive", [False, True])
def test_outputs_are_invariant_under_rotation_reflection_translation_permutation(
    batch, max_neighbors, extensive
):
    model = tiny(max_neighbors=max_neighbors, extensive=extensive)
    out = model(batch)
    assert out.shape == (len(batch), TINY["node_dim"]) and model.out_dim == TINY["node_dim"]
    assert_invariant(model, batch, reflect=True)


def test_full_graph_is_every_pair_and_the_cap_keeps_the_nearest():
    batch = point_cloud_batch([DODECANE, "CC(=O)O"])
    n_big, n_small = torch.bincount(batch.molecule).tolist()
    assert n_big == 38 and n_small == 8
    full = tiny().edges(batch.pos, batch.molecule)
    assert full.shape[1] == n_big * (n_big - 1) + n_small * (n_small - 1)
    capped = tiny(max_neighbors=32).edges(batch.pos, batch.molecule)
    assert capped.shape[1] == n_big * 32 + n_small * (n_small - 1)
    sender, receiver = capped
    for i in range(n_big):  # each kept neighbour is nearer than each dropped one
        kept = sender[receiver == i]
        dropped = torch.tensor([j for j in range(n_big) if j != i and j not in kept.tolist()])
        distance = torch.linalg.vector_norm(batch.pos[:n_big] - batch.pos[i], dim=-1)
        assert len(dropped) == 5 and distance[kept].max() <= distance[dropped].min()


def test_truncation_changes_only_molecules_of_more_than_33_atoms():
    full, capped = tiny().double().eval(), tiny(max_neighbors=32).double().eval()
    capped.load_state_dict(full.state_dict())
    small = in_double(point_cloud_batch(SMALL))
    big = in_double(point_cloud_batch([DODECANE, *SMALL]))
    with torch.no_grad():
        torch.testing.assert_close(capped(small), full(small), atol=1e-12, rtol=0)
        a, b = capped(big), full(big)
    assert (a[0] - b[0]).abs().max() > 1e-4  # dodecane: 5 of 37 neighbours cut per atom
    torch.testing.assert_close(a[1:], b[1:], atol=1e-12, rtol=0)  # the others: unchanged


def boom_attention(
    attn: NodeAttention, x: torch.Tensor, edges: torch.Tensor, edge_attr: torch.Tensor
) -> torch.Tensor:
    """BOOM's edge-list formulation: scores per edge, softmax per receiver by scatter,
    messages summed into the receiver (the slow reference)."""
    sender, receiver = edges
    d_k = attn.dim // attn.num_heads
    q = attn.lin_Q(x).view(-1, attn.num_heads, d_k)[receiver]
    k = attn.lin_K(x).view(-1, attn.num_heads, d_k)[sender]
    v = attn.lin_V(x).view(-1, attn.num_heads, d_k)[sender]
    scores = (q * k).sum(-1) / math.sqrt(d_k) + attn.edge_bias(edge_attr)
    n = x.shape[0]
    peak = scatter(scores, receiver, dim=0, dim_size=n, reduce="max")
    weight = (scores - peak[receiver]).exp()
    alpha = weight / scatter(weight, receiver, dim=0, dim_size=n, reduce="sum")[receiver]
    out = scatter((alpha.unsqueeze(-1) * v).view(-1, attn.dim), receiver, 0, dim_size=n)
    return attn.lin_O(out)


@pytest.mark.parametrize("max_neighbors", [None, 32])
def test_model_equals_boom_edge_list_formulation(max_neighbors):
    model = tiny(max_neighbors=max_neighbors).double().eval()
    batch = in_double(point_cloud_batch([DODECANE, *SMALL]))
    edges = model.edges(batch.pos, batch.molecule)
    length = torch.linalg.vector_norm(batch.pos[edges[0]] - batch.pos[edges[1]], dim=-1)
    edge_attr = model.embed_edge(length.unsqueeze(-1))
    with torch.no_grad():
        x = model.embed_node(batch.z)
        for conv in model.convs:
            x = conv.norm1(x + boom_attention(conv.node_attn, x, edges, edge_attr))
            x = conv.norm2(x + conv.ffn(x))
        counts = torch.bincount(batch.molecule).unsqueeze(-1)
        pooled = scatter(x, batch.molecule, dim=0, reduce="sum") / counts
        torch.testing.assert_close(model(batch), model.decoder(pooled), atol=1e-10, rtol=0)


def test_element_outside_the_embedding_is_refused(batch):
    model = tiny(max_z=10)  # carbon, nitrogen, oxygen fit; the table's heavier ones not
    with pytest.raises(ValueError, match=r"atomic numbers must lie in \[0, 10\)"):
        model(point_cloud_batch(["CCl"]))
    with pytest.raises(ValueError, match="divisible"):
        Graphormer3D(node_dim=10, num_heads=4)


def test_every_element_is_embedded():
    """BOOM's encoder knew H, C, N, O only: fluorine (QM9), sulfur, chlorine, bromine
    and iodine molecules are predicted, each element with its own embedding."""
    model = tiny()
    out = model(point_cloud_batch(["CF", "CS", "CCl", "CBr", "CI", "CO"]))
    assert torch.isfinite(out).all() and len(set(out[:, 0].tolist())) == 6


def test_training_steps_lower_the_loss(batch):
    torch.manual_seed(0)
    model = PropertyRegressor(tiny(), optimizer=partial(torch.optim.Adam, lr=1e-2))
    losses = training_losses(model, batch, steps=25)
    assert losses[-1] < 0.5 * losses[0]


def test_config_composes_with_ema_and_boom_sizes(batch):
    tiny_sizes = [f"model.module.backbone.{k}={v}" for k, v in TINY.items()]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=["model=graphormer3d", "task=qm9_homo", *tiny_sizes])
        published = compose("train", overrides=["model=graphormer3d", "task=csd10k_hof"])
    assert cfg.model.batch_size == 64 and cfg.model.module.optimizer.lr == 1e-4
    ema = instantiate(cfg.model.callbacks.ema)
    assert isinstance(ema, EMA)
    module = instantiate(cfg.model.module)
    assert module.backbone.extensive is False and module.backbone.max_neighbors is None
    assert module(batch).shape == (len(batch),)
    assert published.model.module.backbone.extensive is True


def test_constructor_defaults_are_the_config_sizes_and_boom_parameter_count():
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        backbone = compose("train", overrides=["model=graphormer3d"]).model.module.backbone
    defaults = inspect.signature(Graphormer3D).parameters
    for key, value in backbone.items():
        if key not in ("_target_", "extensive"):
            assert defaults[key].default == value, key
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = PropertyRegressor(Graphormer3D(), optimizer=torch.optim.Adam)
    n = sum(p.numel() for p in model.parameters())
    # with BOOM's embedding of 4 elements instead of 119: Table 3's 47.1 M
    assert n - (119 - 4) * 640 == 47_100_041
