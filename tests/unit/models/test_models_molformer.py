"""MoLFormer: its linear attention equals a loop-written sum over the same random
features, rotary embedding rotates position p by p·θ, padding does not change a molecule,
saved folders load with identical outputs, and IBM's Lightning names map onto ours."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from smiles_helpers import SMILES
from test_models_smiles import token_batch

from oodmol.config import compose_config
from oodmol.data.tokens import atom_level_tokenizer
from oodmol.models.backbones.molformer import (
    LinearSelfAttention,
    MoLFormer,
    convert_ibm_state_dict,
    rotate,
)
from oodmol.uq.likelihood import AbsoluteErrorLikelihood

SIZES = dict(layers=2, heads=2, hidden=16, intermediate=16, features=8)


def tiny_molformer() -> MoLFormer:
    torch.manual_seed(0)
    vocab = atom_level_tokenizer(SMILES).get_vocab_size()
    return MoLFormer(vocab_size=vocab, pad_id=0, **SIZES).eval()


def slow_attention(layer: LinearSelfAttention, x: torch.Tensor, mask: torch.Tensor):
    """Each query's weighted mean of the values, one query and key at a time:
    weight(i, j) = Σ_f relu(q_i·s W)_f relu(k_j·s W)_f over unpadded keys j."""
    batch, length, hidden = x.shape
    heads, d = layer.heads, hidden // layer.heads
    w, scale = layer.feature_map.weight, d**-0.25
    out = torch.zeros_like(x)
    for b in range(batch):
        q, k, v = (f(x[b]).view(length, heads, d) for f in (layer.query, layer.key, layer.value))
        for h in range(heads):
            for i in range(length):
                qi = rotate(q[None, i, h], torch.tensor([i]))[0]
                phi_q = torch.relu(qi * scale @ w)
                total, norm = torch.zeros(d), torch.tensor(0.0)
                for j in range(length):
                    if mask[b, j]:
                        kj = rotate(k[None, j, h], torch.tensor([j]))[0]
                        weight = phi_q @ torch.relu(kj * scale @ w)
                        total, norm = total + weight * v[j, h], norm + weight
                out[b, i, h * d : (h + 1) * d] = total / norm.clamp(min=layer.eps)
    return out


def test_linear_attention_equals_the_loop_over_random_features() -> None:
    torch.manual_seed(1)
    layer = LinearSelfAttention(hidden=8, heads=2, features=6, eps=1e-6).eval()
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        torch.testing.assert_close(layer(x, mask), slow_attention(layer, x, mask))


def test_random_features_are_redrawn_in_training_only() -> None:
    layer = LinearSelfAttention(hidden=8, heads=2, features=6, eps=1e-6)
    x, mask = torch.randn(1, 3, 8), torch.ones(1, 3, dtype=torch.int64)
    before = layer.feature_map.weight.clone()
    layer.eval()(x, mask)
    assert torch.equal(layer.feature_map.weight, before)
    layer.train()(x, mask)
    assert not torch.equal(layer.feature_map.weight, before)


def test_rotary_embedding_rotates_position_p_by_p_theta() -> None:
    positions = torch.arange(4)
    unit = torch.tensor([1.0, 0.0]).expand(4, 2)  # d = 2: θ = 1
    expected = torch.stack([positions.cos(), positions.sin()], dim=-1).float()
    torch.testing.assert_close(rotate(unit, positions), expected)
    # d = 4: pairs (x0, x2) at θ0 = 1 and (x1, x3) at θ1 = 10000^(-1/2) = 0.01
    x = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    p = 3
    turned = rotate(x, torch.tensor([p]))[0]
    expected = [math.cos(p), math.cos(0.01 * p), math.sin(p), math.sin(0.01 * p)]
    torch.testing.assert_close(turned, torch.tensor(expected))
    assert torch.equal(rotate(x, torch.tensor([0])), x)  # position 0: unchanged


def test_padding_does_not_change_a_molecule() -> None:
    model = tiny_molformer()
    with torch.no_grad():
        alone = torch.cat([model(token_batch([s])) for s in SMILES])
        dynamic = model(token_batch(SMILES))
        fixed = model(token_batch(SMILES, pad_to=202))
    torch.testing.assert_close(dynamic, alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(fixed, alone, rtol=0, atol=1e-5)


def test_save_and_load_round_trip_is_exact(tmp_path: Path) -> None:
    model = tiny_molformer()
    folder = model.save_pretrained(tmp_path / "saved")
    vocab = atom_level_tokenizer(SMILES).get_vocab_size()
    loaded = MoLFormer(vocab, 0, pretrained=str(folder)).eval()
    loaded.classifier.load_state_dict(model.classifier.state_dict())
    batch = token_batch(SMILES)
    with torch.no_grad():
        assert torch.equal(loaded(batch), model(batch))
    with pytest.raises(ValueError, match=r"more than the \d+ embeddings"):
        MoLFormer(vocab_size=10_000, pad_id=0, pretrained=str(folder))


def ibm_state_dict(model: MoLFormer) -> dict[str, torch.Tensor]:
    """`model`'s tensors under the names of IBM's Lightning checkpoints (the
    fast-transformers encoder of train_pubchem_light.py and finetune's `Net`)."""
    ours = model.state_dict()
    state = {"tok_emb.weight": ours["embeddings.word_embeddings.weight"]}
    for i in range(len(model.encoder.layer)):
        layer, ibm = f"encoder.layer.{i}.", f"blocks.layers.{i}."
        names = {
            "attention.query_projection": "attention.self.query",
            "attention.key_projection": "attention.self.key",
            "attention.value_projection": "attention.self.value",
            "attention.out_projection": "attention.output.dense",
            "norm1": "attention.output.LayerNorm",
            "linear1": "intermediate.dense",
            "linear2": "output.dense",
            "norm2": "output.LayerNorm",
        }
        for theirs, mine in names.items():
            for kind in ("weight", "bias"):
                state[f"{ibm}{theirs}.{kind}"] = ours[f"{layer}{mine}.{kind}"]
        omega = ours[f"{layer}attention.self.feature_map.weight"]
        state[f"{ibm}attention.inner_attention.feature_map.omega"] = omega
        state[f"{ibm}attention.rotaryemb.inv_freq"] = torch.ones(4)
    for kind in ("weight", "bias"):
        state[f"blocks.norm.{kind}"] = ours[f"LayerNorm.{kind}"]
        state[f"net.fc1.{kind}"] = ours[f"classifier.dense.{kind}"]
        state[f"net.fc2.{kind}"] = ours[f"classifier.dense2.{kind}"]
        state[f"net.final.{kind}"] = torch.zeros(1) if kind == "bias" else torch.ones(1, 16)
        state[f"lang_model.head.{kind}"] = torch.zeros(3)
    return state


def test_ibm_checkpoint_names_convert_onto_ours() -> None:
    model = tiny_molformer()
    converted = convert_ibm_state_dict(ibm_state_dict(model))
    final = {k: converted.pop(k) for k in ("final.weight", "final.bias")}
    assert final["final.weight"].shape == (1, 16)
    torch.manual_seed(5)
    other = MoLFormer(model.config["vocab_size"], 0, **SIZES).eval()
    other.load_state_dict(converted)  # strict: every name of ours, nothing else
    batch = token_batch(SMILES)
    with torch.no_grad():
        assert torch.equal(other(batch), model(batch))
    with pytest.raises(ValueError, match=r"unknown parameter 'blocks\.extra\.weight'"):
        convert_ibm_state_dict({"blocks.extra.weight": torch.zeros(1)})


def test_absolute_error_likelihood_is_the_mean_absolute_error() -> None:
    loss = AbsoluteErrorLikelihood().loss(torch.tensor([1.0, -3.0]), torch.tensor([0.0, 0.0]))
    assert loss.item() == 2.0


def test_boom_protocol_trains_with_l1_and_the_default_with_mse() -> None:
    boom = compose_config("train", ["protocol=boom", "model=molformer"])
    assert isinstance(instantiate(boom.model.module.likelihood), AbsoluteErrorLikelihood)
    assert boom.protocol.holdout is False and boom.callbacks.model_checkpoint is None
    default = compose_config("train", ["model=molformer"])
    assert "likelihood" not in default.model.module  # PropertyRegressor's MSE
    assert default.model.features.isomeric is False
