"""GeoFormer: symmetries, independence of a molecule's prediction from its batch (the
padding of the dense pair tensors), equality with a molecule-by-molecule reference,
training steps and its Hydra config (upstream's sizes, size-grouped batches)."""

from __future__ import annotations

import inspect
from dataclasses import replace
from functools import partial

import pytest
import torch
from fit_helpers import training_losses
from geometry_helpers import assert_invariant, in_double, point_cloud_batch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from paths import REPO

from oodmol.models.backbones.geoformer import Geoformer
from oodmol.models.module import PropertyRegressor

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = REPO / "configs"
TINY = {"embedding_dim": 16, "ffn_embedding_dim": 24, "num_layers": 3, "num_heads": 4, "num_rbf": 8}
# dodecane (38 atoms, longer than the 5 Å cutoff) pads the others in a shared batch
SMILES = ["CC(=O)O", "C", "c1ccccc1O", "CCCCCCCCCCCC", "N#CC"]


def tiny(**kw) -> Geoformer:
    torch.manual_seed(0)
    return Geoformer(**{**TINY, **kw}).double().eval()


def test_outputs_are_invariant_under_rotation_reflection_translation_permutation():
    model = tiny()
    batch = point_cloud_batch(SMILES)
    h, segment = model(in_double(batch))
    assert h.shape == (len(batch.z), 8) and model.out_dim == 8 and segment is not None
    assert_invariant(model, batch, reflect=True)


def test_a_molecules_prediction_does_not_depend_on_its_batch():
    model = tiny()
    with torch.no_grad():
        together, _ = model(in_double(point_cloud_batch(SMILES)))
        alone = [model(in_double(point_cloud_batch([s])))[0] for s in SMILES]
    torch.testing.assert_close(together, torch.cat(alone), atol=1e-12, rtol=0)


def reference_atoms(model: Geoformer, z: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """One molecule, no padding, the pair sums written out atom by atom (the slow
    reference of the module docstring's equations)."""
    enc = model.geo_encoder
    n = len(z)
    dist = torch.cdist(pos, pos)
    within = dist < enc.cutoff
    x = enc.x_in_layernorm(enc.embedding(z))
    e = torch.nn.functional.silu(enc.dist_proj(enc.distance_expansion(dist)))
    e = e * within.unsqueeze(-1)
    for layer in enc.layers:
        att = layer.self_attn
        heads, f = att.num_heads, att.embedding_dim
        q, k, v = (p(x).view(n, heads, -1) for p in (att.q_proj, att.k_proj, att.v_proj))
        dk = torch.nn.functional.silu(att.dk_proj(e)).view(n, n, heads, -1)
        messages = torch.zeros(n, n, f, dtype=x.dtype)
        for i in range(n):
            for j in range(n):
                if within[i, j]:
                    w = (q[i] * k[j] * dk[i, j]).sum(-1)
                    weight = torch.nn.functional.silu(w) * att.cutoff(dist[i, j])
                    messages[i, j] = (weight.unsqueeze(-1) * v[j]).reshape(f)
        x = layer.attn_layer_norm(x + messages.sum(1))
        if att.update_pairs:
            u = torch.zeros(n, 3, f, dtype=x.dtype)
            projected = att.du_update_proj(messages)
            for i in range(n):
                for j in range(n):
                    if within[i, j] and i != j:
                        direction = (pos[j] - pos[i]) / dist[i, j]
                        u[i] += direction.unsqueeze(-1) * projected[i, j]
            ws, wt = att.dihedral_proj(u).split(f, dim=-1)
            ipe = (ws.unsqueeze(1) * wt.unsqueeze(0)).sum(2)  # ⟨w_s u_i, w_t u_j⟩
            e = e + torch.nn.functional.silu(att.edge_attr_update(e)) * ipe
        x = layer.final_layer_norm(x + layer.ffn(x))
    return model.geo_decoder(x)


def test_model_equals_the_atom_by_atom_reference():
    model = tiny(num_layers=2)
    batch = in_double(point_cloud_batch(["c1ccccc1O", "CCCCCCCCCCCC"]))
    with torch.no_grad():
        h, _ = model(batch)
        expected = torch.cat(
            [
                reference_atoms(model, batch.z[batch.molecule == m], batch.pos[batch.molecule == m])
                for m in range(len(batch))
            ]
        )
    torch.testing.assert_close(h, expected, atol=1e-10, rtol=0)


def test_atoms_beyond_the_cutoff_do_not_interact():
    """Two methanes 20 Å apart in one molecule: each half's atom vectors are those of a
    methane alone."""
    model = tiny()
    methane = in_double(point_cloud_batch(["C"]))
    far = methane.pos + torch.tensor([20.0, 0.0, 0.0], dtype=torch.float64)
    pair = replace(
        methane,
        z=methane.z.repeat(2),
        pos=torch.cat([methane.pos, far]),
        molecule=methane.molecule.repeat(2),
    )
    with torch.no_grad():
        alone, _ = model(methane)
        both, _ = model(pair)
    torch.testing.assert_close(both, torch.cat([alone, alone]), atol=1e-12, rtol=0)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"atomic numbers must lie in \[1, 8\)"):
        tiny(max_z=8)(in_double(point_cloud_batch(["CO"])))
    with pytest.raises(ValueError, match="divisible"):
        Geoformer(embedding_dim=10, num_heads=4)


def test_training_steps_lower_the_loss():
    """Every parameter gets a gradient (DDP refuses unused ones): the last layer has no
    pair update."""
    torch.manual_seed(0)
    model = PropertyRegressor(
        Geoformer(**TINY), optimizer=partial(torch.optim.Adam, lr=1e-2), extensive=True
    )
    losses = training_losses(model, point_cloud_batch(SMILES), steps=25)
    assert losses[-1] < 0.5 * losses[0]


def test_checkpointed_layers_give_the_same_outputs_and_gradients():
    batch = in_double(point_cloud_batch(SMILES))
    grads = []
    for checkpoint_layers in (False, True):
        model = tiny(checkpoint_layers=checkpoint_layers).train()
        h, _ = model(batch)
        h.square().sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-10, rtol=0, msg=name)


def test_config_composes_with_upstream_sizes_and_size_grouped_batches():
    tiny_sizes = [f"model.module.backbone.{k}={v}" for k, v in TINY.items()]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=["model=geoformer", "task=qm9_homo", *tiny_sizes])
        published = compose("train", overrides=["model=geoformer"]).model.module.backbone
    assert cfg.model.group_by_size is True and cfg.model.batch_size == 32
    assert cfg.model.module.optimizer.lr == 2e-5
    assert cfg.model.module.scheduler.warmup_steps == 20000
    module = instantiate(cfg.model.module)
    assert module(point_cloud_batch(SMILES)).shape == (len(SMILES),)
    defaults = inspect.signature(Geoformer).parameters
    for key, value in published.items():
        if key not in ("_target_", "checkpoint_layers"):
            assert defaults[key].default == value, key
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        n = sum(p.numel() for p in Geoformer().parameters())
    # upstream's 50,640,640 less the last layer's unused pair update (3 Linears of 512)
    assert n == 50_640_640 - (2 * (512 * 512 + 512) + 2 * 512 * 512)
