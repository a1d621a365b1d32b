"""SMILES transformers: ChemBERTa and ModernBERT equal the `transformers` sequence
classifiers they re-express on the same weights, padding does not change a molecule's
output (dynamic and BOOM's fixed padding agree), pretrained folders load with identical
outputs and their own tokenizer, and `model.pretrained` resolves offline or says why not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from smiles_helpers import SMILES, TINY, save_tiny_modernbert, save_tiny_roberta
from torch import nn
from transformers import (
    ModernBertConfig,
    ModernBertForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from oodmol.data.batches import TokenBatch
from oodmol.data.featurize.smiles import SmilesText
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.data.tokens import TokenFeatures, atom_level_tokenizer
from oodmol.models.backbones.chemberta import ChemBERTa
from oodmol.models.backbones.modernbert import ModernBERT
from oodmol.pretrained import PretrainedNotFoundError, resolve_pretrained


def token_batch(smiles: list[str], tokenizer=None, pad_to: int | None = None) -> TokenBatch:
    """The molecules' ids padded to the longest (or to `pad_to`), as TokenSet pads."""
    tokenizer = tokenizer or atom_level_tokenizer(SMILES)
    ids = [tokenizer.encode(s).ids for s in smiles]
    pad = tokenizer.token_to_id("[PAD]")
    pad = tokenizer.token_to_id("<pad>") if pad is None else pad
    width = pad_to or max(map(len, ids))
    input_ids = torch.full((len(ids), width), pad, dtype=torch.int64)
    mask = torch.zeros_like(input_ids)
    for row, seq in enumerate(ids):
        input_ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return TokenBatch(input_ids=input_ids, attention_mask=mask, y=None, index=None)


def tiny_chemberta() -> ChemBERTa:
    torch.manual_seed(0)
    vocab = atom_level_tokenizer(SMILES).get_vocab_size()
    sizes = dict(layers=2, heads=2, hidden=16, intermediate=32, max_positions=300)
    return ChemBERTa(vocab_size=vocab, pad_id=0, **sizes).eval()


def tiny_modernbert() -> ModernBERT:
    torch.manual_seed(0)
    vocab = atom_level_tokenizer(SMILES).get_vocab_size()
    sizes = dict(layers=3, heads=2, hidden=16, intermediate=24, local_window=4)
    return ModernBERT(vocab_size=vocab, pad_id=0, cls_id=2, sep_id=3, **sizes).eval()


def test_chemberta_is_roberta_for_sequence_classification() -> None:
    ours = tiny_chemberta()
    out = nn.Linear(16, 1)
    config = RobertaConfig(**ours.encoder.config.to_dict())
    config.num_labels = 1
    reference = RobertaForSequenceClassification(config).eval()
    reference.roberta.load_state_dict(ours.encoder.state_dict(), strict=False)
    reference.classifier.dense.load_state_dict(ours.dense.state_dict())
    reference.classifier.out_proj.load_state_dict(out.state_dict())
    batch = token_batch(SMILES)
    with torch.no_grad():
        expected = reference(batch.input_ids, attention_mask=batch.attention_mask).logits
        torch.testing.assert_close(out(ours(batch)), expected, rtol=0, atol=1e-6)


def test_modernbert_is_modernbert_for_sequence_classification() -> None:
    ours = tiny_modernbert()
    out = nn.Linear(16, 1)
    config = ModernBertConfig(**ours.encoder.config.to_dict())
    config.num_labels = 1
    assert config.classifier_pooling == "mean"
    assert config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    reference = ModernBertForSequenceClassification(config).eval()
    reference.model.load_state_dict(ours.encoder.state_dict())
    reference.head.load_state_dict(ours.head.state_dict())
    reference.classifier.load_state_dict(out.state_dict())
    batch = token_batch(SMILES)
    with torch.no_grad():
        expected = reference(batch.input_ids, attention_mask=batch.attention_mask).logits
        torch.testing.assert_close(out(ours(batch)), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("build", [tiny_chemberta, tiny_modernbert])
def test_padding_does_not_change_a_molecule(build) -> None:
    """A molecule alone, in a batch padded to its longest molecule, and padded to a
    fixed 128 tokens as BOOM batches: the same vector."""
    model = build()
    with torch.no_grad():
        alone = torch.cat([model(token_batch([s])) for s in SMILES])
        dynamic = model(token_batch(SMILES))
        fixed = model(token_batch(SMILES, pad_to=128))
    torch.testing.assert_close(dynamic, alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(fixed, alone, rtol=0, atol=1e-5)


def test_pretrained_chemberta_loads_its_weights_and_tokenizer(tmp_path: Path) -> None:
    from transformers import AutoTokenizer, RobertaModel

    folder = save_tiny_roberta(tmp_path / "tiny-chemberta")
    features = TokenFeatures(tokenizer=str(folder))
    tokenizer = _fitted(features, tmp_path).tokenizer
    hf = AutoTokenizer.from_pretrained(str(folder))
    for smiles in SMILES:
        assert tokenizer.encode(smiles).ids == hf(smiles)["input_ids"]
    facts = features.facts()
    assert facts["pad_id"] == hf.pad_token_id == 1 and facts["cls_id"] == hf.cls_token_id
    ours = ChemBERTa(facts["vocab_size"], facts["pad_id"], pretrained=str(folder)).eval()
    reference = RobertaModel.from_pretrained(str(folder), add_pooling_layer=False).eval()
    batch = token_batch(SMILES, tokenizer)
    with torch.no_grad():
        expected = reference(batch.input_ids, attention_mask=batch.attention_mask)
        states = ours.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    assert torch.equal(states.last_hidden_state, expected.last_hidden_state)


def test_pretrained_modernbert_round_trip_is_exact(tmp_path: Path) -> None:
    model = tiny_modernbert()
    model.encoder.save_pretrained(str(tmp_path / "saved"))
    atom_level_tokenizer(SMILES).save(str(tmp_path / "saved" / "tokenizer.json"))
    vocab = atom_level_tokenizer(SMILES).get_vocab_size()
    loaded = ModernBERT(vocab, 0, pretrained=str(tmp_path / "saved")).eval()
    loaded.head.load_state_dict(model.head.state_dict())
    batch = token_batch(SMILES)
    with torch.no_grad():
        assert torch.equal(loaded(batch), model(batch))


def test_chemberta_round_trip_is_exact(tmp_path: Path) -> None:
    model = tiny_chemberta()
    model.encoder.save_pretrained(str(tmp_path / "saved"))
    vocab = atom_level_tokenizer(SMILES).get_vocab_size()
    loaded = ChemBERTa(vocab, 0, pretrained=str(tmp_path / "saved")).eval()
    loaded.dense.load_state_dict(model.dense.state_dict())
    batch = token_batch(SMILES)
    with torch.no_grad():
        assert torch.equal(loaded(batch), model(batch))


def test_a_tokenizer_larger_than_the_embeddings_is_refused(tmp_path: Path) -> None:
    folder = save_tiny_modernbert(tmp_path / "tiny")
    with pytest.raises(ValueError, match=r"more than the \d+ embeddings"):
        ModernBERT(vocab_size=10_000, pad_id=0, pretrained=str(folder))


def test_hub_ids_resolve_through_the_local_copies(tmp_path, monkeypatch) -> None:
    copy = save_tiny_modernbert(tmp_path / "copies" / "someone" / "tiny-modernbert")
    monkeypatch.setenv("OODMOL_MODEL_DIR", str(tmp_path / "copies"))
    assert resolve_pretrained("someone/tiny-modernbert") == copy
    assert resolve_pretrained(str(copy)) == copy  # a folder is itself
    assert TokenFeatures(tokenizer="someone/tiny-modernbert").source  # resolved at fit
    model = ModernBERT(vocab_size=5, pad_id=0, pretrained="someone/tiny-modernbert")
    assert model.encoder.config.num_hidden_layers == TINY["num_hidden_layers"]


def test_a_missing_model_says_where_it_was_looked_for(tmp_path, monkeypatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("OODMOL_MODEL_DIR", str(tmp_path))
    with pytest.raises(PretrainedNotFoundError) as error:
        resolve_pretrained("nobody/absent-model")
    message = str(error.value)
    assert "model.pretrained=nobody/absent-model" in message
    assert str(tmp_path / "nobody" / "absent-model") in message
    assert "Hugging Face cache and hub" in message and "--local-dir" in message
    monkeypatch.delenv("OODMOL_MODEL_DIR")
    with pytest.raises(PretrainedNotFoundError, match="OODMOL_MODEL_DIR \\(not set\\)"):
        resolve_pretrained("nobody/absent-model")
    with pytest.raises(PretrainedNotFoundError, match="no such folder"):
        resolve_pretrained(str(tmp_path / "not-here"))


def _fitted(features: TokenFeatures, tmp_path: Path) -> TokenFeatures:
    table = MoleculeTable("tiny", np.arange(len(SMILES)), np.array(SMILES), {"y": np.zeros(7)})
    store = FeatureStore.build_or_open(SmilesText(), table, tmp_path, n_jobs=1, progress=False)
    features.fit(store, np.arange(len(SMILES)))
    return features
