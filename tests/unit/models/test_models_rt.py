"""The Regression Transformer: known answers of its tokens (SELFIES with charges, Cl/Br,
two-digit ring closures; a value's digit tokens and back), of the numeric encodings and
of decoding (BOOM's '00913' read both ways, flagged malformed and counted per set); a
tiny model that learns to write two molecules' values; no test label in the input;
save_pretrained/from_pretrained round trips of the XLNet and the tokenizer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from oodmol.data.batches import TokenBatch
from oodmol.data.featurize.smiles import SmilesText
from oodmol.data.rt_tokens import (
    BLOCK,
    FIXED_TOKENS,
    RTFeatures,
    number_tokens,
    rt_tokenizer,
    to_selfies,
)
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.metrics.sets import compute_metrics
from oodmol.models.backbones.rt import (
    RTEncoder,
    RTLanguageModel,
    float_encoding,
    numeric_encodings,
)
from oodmol.models.rt.regression_transformer import (
    RegressionTransformer,
    decode_number,
    well_formed,
)
from oodmol.predictions import SetPredictions

TINY = dict(layers=2, hidden=16, heads=2, intermediate=32, dropout=0.0)


@pytest.mark.parametrize(
    "smiles, expected",
    [
        ("C[NH3+]", ["[C]", "[NH3+1]"]),
        ("[O-]C(=O)CCl", ["[O-1]", "[C]", "[=Branch1]", "[C]", "[=O]", "[C]", "[Cl]"]),
        ("BrCCBr", ["[Br]", "[C]", "[C]", "[Br]"]),
        ("CC%10CCCCCCCCC%10", [*["[C]"] * 11, "[Ring1]", "[#Branch2]"]),
        ("CCO.[Na+]", ["[C]", "[C]", "[O]", ".", "[Na+1]"]),
    ],
)  # fmt: skip
def test_selfies_tokens(smiles: str, expected: list[str]) -> None:
    selfies = to_selfies(smiles)
    assert rt_tokenizer([selfies]).encode(selfies).tokens == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        (0.717, ["_0_0_", "_._", "_7_-1_", "_1_-2_", "_7_-3_"]),
        (1.0, ["_1_0_", "_._", "_0_-1_", "_0_-2_", "_0_-3_"]),
        (0.0456, ["_0_0_", "_._", "_0_-1_", "_4_-2_", "_6_-3_"]),  # '%0.3f' rounds
    ],
)  # fmt: skip
def test_a_value_is_its_digit_tokens_and_back(value: float, expected: list[str]) -> None:
    assert number_tokens(value) == expected
    assert well_formed(expected)
    assert decode_number(expected) == pytest.approx(round(value, 3), abs=1e-12)
    assert decode_number(expected, "boom") == pytest.approx(round(value, 3), abs=1e-12)


def test_values_outside_the_block_are_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        number_tokens(-0.2)
    with pytest.raises(ValueError, match="outside"):
        number_tokens(10.0)


@pytest.mark.parametrize(
    "tokens, place_value, boom",
    [
        # BOOM's '00913': a digit where the point belongs
        (["_0_0_", "_0_0_", "_9_-1_", "_1_-2_", "_3_-3_"], 0.913, 913.0),
        # a molecule token in the block: BOOM stops reading there
        (["_0_0_", "_._", "[C]", "_1_-2_", "_3_-3_"], 0.013, 0.0),
        # two points: not a number for BOOM (-1)
        (["_0_0_", "_._", "_._", "_1_-2_", "_3_-3_"], 0.013, -1.0),
        # digits of the wrong places
        (["_0_0_", "_._", "_5_-2_", "_1_-2_", "_3_-3_"], 0.063, 0.513),
    ],
)  # fmt: skip
def test_malformed_decodes(tokens: list[str], place_value: float, boom: float) -> None:
    assert not well_formed(tokens)
    assert decode_number(tokens) == pytest.approx(place_value, abs=1e-12)
    assert decode_number(tokens, "boom") == pytest.approx(boom, abs=1e-12)


def test_numeric_encoding_known_answers() -> None:
    # IBM's FloatEncoding: v/1, -v/1, v/3, -v/3, … scaled by 10/vmax
    assert float_encoding("_5_-1_", 4).tolist() == pytest.approx([5.0, -5.0, 5 / 3, -5 / 3])
    assert float_encoding("_3_0_", 2, vmax=2.0).tolist() == pytest.approx([15.0, -15.0])
    assert float_encoding("_._", 4).tolist() == [0.0] * 4
    assert float_encoding("[C]", 4).tolist() == [0.0] * 4
    table = numeric_encodings(len(FIXED_TOKENS) + 3, 2)
    assert table[FIXED_TOKENS.index("_7_-3_")].tolist() == pytest.approx([0.07, -0.07])
    assert table[len(FIXED_TOKENS) :].abs().sum() == 0  # the molecules' tokens


def test_the_numeric_encodings_are_added_to_the_embeddings() -> None:
    torch.manual_seed(0)
    model = RTLanguageModel(len(FIXED_TOKENS) + 5, pad_id=0, **TINY)
    ids = torch.tensor([[FIXED_TOKENS.index("_9_0_"), len(FIXED_TOKENS) + 1]])
    learnt = model.transformer.word_embedding(ids)
    expected = torch.stack([float_encoding("_9_0_", 16), torch.zeros(16)]).unsqueeze(0)
    torch.testing.assert_close(model.embed(ids) - learnt, expected)


@pytest.fixture
def store(tmp_path: Path) -> FeatureStore:
    smiles = ["CCO", "C[NH3+]", "ClCCBr", "CC(=O)O"]
    table = MoleculeTable("tiny", np.arange(4), np.array(smiles), {"y": np.arange(4.0)})
    return FeatureStore.build_or_open(SmilesText(), table, tmp_path, n_jobs=1, progress=False)


def test_sequences_have_a_masked_block_whatever_the_label(store: FeatureStore) -> None:
    features = RTFeatures()
    features.fit(store, np.array([0, 1, 3]))  # [Cl] and [Br] only outside training
    assert features.facts()["pad_id"] == 0
    labelled = features.dataset(store, np.arange(4), np.array([5.0, 6.0, 7.0, 8.0]), "ood")
    unlabelled = features.dataset(store, np.arange(4), None, "predict")
    (batch,) = labelled.__getitems__([0, 2])
    (same,) = unlabelled.__getitems__([0, 2])
    assert torch.equal(batch.input_ids, same.input_ids)
    tokens = [features.tokenizer.id_to_token(int(i)) for i in batch.input_ids[1]]
    assert tokens == ["[CLS]", "<prop>", *["[MASK]"] * 5, "|", "[UNK]", "[C]", "[C]", "[UNK]",
                      "[SEP]"]  # fmt: skip
    assert features.imputed["ood"] == 2
    assert batch.attention_mask[0].tolist() == [1] * 12 + [0]  # CCO: [C][C][O]


class FixedLogits(nn.Module):
    """A stand-in LM that 'predicts' given tokens for the block of every molecule."""

    def __init__(self, rows: list[list[str]], vocab_size: int) -> None:
        super().__init__()
        self.xlnet = SimpleNamespace(config=SimpleNamespace(vocab_size=vocab_size))
        logits = torch.zeros(len(rows), 5, vocab_size)
        for i, row in enumerate(rows):
            for j, token in enumerate(row):
                logits[i, j, FIXED_TOKENS.index(token) if token != "[C]" else -1] = 1.0
        self.logits = logits

    def forward(self, input_ids, attention_mask, perm_mask, target_mapping) -> torch.Tensor:
        hidden = perm_mask.bool()
        assert hidden[:, :, BLOCK].all() and not hidden[:, :, BLOCK.stop :].any()
        return self.logits


class Capture(FixedLogits):
    """Keeps the masks it is given."""

    def forward(self, input_ids, attention_mask, perm_mask, target_mapping) -> torch.Tensor:
        self.seen = perm_mask.bool(), target_mapping
        return torch.zeros(len(input_ids), 5, 60)


def test_training_sees_the_block_in_a_random_order() -> None:
    """Each target sees the molecule and the targets before it in its own random order:
    never itself, and over the block a strict order (10 visible pairs of 5 targets); the
    molecule's tokens never see the block."""
    capture = Capture([], 60)
    model = RegressionTransformer(capture, optimizer=torch.optim.AdamW)
    n, length = 6, 12
    batch = TokenBatch(
        input_ids=torch.ones(n, length, dtype=torch.int64),
        attention_mask=torch.ones(n, length, dtype=torch.int64),
        index=torch.arange(n),
    )
    torch.manual_seed(0)
    model.block_logits(batch, random_order=True)
    hidden, mapping = capture.seen
    assert mapping.argmax(dim=2).tolist() == [list(range(2, 7))] * n
    block = hidden[:, BLOCK, BLOCK]
    assert block.diagonal(dim1=1, dim2=2).all()
    assert ((~block).sum(dim=(1, 2)) == 10).all()
    assert ((~block) & (~block).transpose(1, 2)).sum() == 0  # antisymmetric
    assert hidden[:, :, BLOCK][:, BLOCK.stop :].all() and hidden[:, :2, BLOCK].all()
    assert not hidden[:, :, BLOCK.stop :].any() and not hidden[:, :, :2].any()
    orders = {tuple((~block[i]).sum(dim=1).tolist()) for i in range(n)}
    assert len(orders) > 1  # each molecule its own order


def test_malformed_predictions_are_flagged_and_counted() -> None:
    rows = [
        ["_0_0_", "_._", "_9_-1_", "_1_-2_", "_3_-3_"],
        ["_0_0_", "_0_0_", "_9_-1_", "_1_-2_", "_3_-3_"],
        ["_0_0_", "[C]", "_9_-1_", "_1_-2_", "_3_-3_"],
    ]
    model = RegressionTransformer(FixedLogits(rows, 60), optimizer=torch.optim.AdamW)
    model.fit_range(np.array([1.0, 3.0]))  # y = 1 + 2·normalised
    batch = TokenBatch(
        input_ids=torch.ones(3, 10, dtype=torch.int64),
        attention_mask=torch.ones(3, 10, dtype=torch.int64),
        index=torch.arange(3),
    )
    prediction = model.predict_batch(batch)
    assert prediction.mean.tolist() == pytest.approx([2.826, 2.826, 2.826])
    assert prediction.flags["malformed"].tolist() == [False, True, True]
    model.decode = "boom"
    assert model.predict_batch(batch).mean.tolist() == pytest.approx([2.826, 1827.0, 1.0])

    flagged = SetPredictions(
        "ood", np.arange(3), np.array(["C"] * 3), np.array([2.0, 2.0, 1.0]),
        prediction.mean.numpy().astype(float),
        flags={"malformed": prediction.flags["malformed"].numpy()},
    )  # fmt: skip
    assert compute_metrics({"ood": flagged}, 2.0)["ood"]["malformed"] == 2
    assert flagged.frame()["malformed"].tolist() == [0, 1, 1]


def test_normalisation_and_targets() -> None:
    model = RegressionTransformer(FixedLogits([], 60), optimizer=torch.optim.AdamW)
    model.fit_range(np.array([2.0, 4.0, 3.0]))
    ids = model.label_ids(torch.tensor([2.0, 4.0, 3.4342]))
    tokens = [[FIXED_TOKENS[i] for i in row] for row in ids.tolist()]
    assert tokens == [number_tokens(0.0), number_tokens(1.0), number_tokens(0.717)]
    with pytest.raises(ValueError, match="normalise_over"):
        RegressionTransformer(FixedLogits([], 60), torch.optim.AdamW, normalise_over="test")


@pytest.mark.slow  # trains
def test_a_tiny_rt_learns_to_write_its_training_values(store: FeatureStore) -> None:
    features = RTFeatures()
    features.fit(store, np.arange(4))
    y = np.array([1.0, 3.0, 2.2, 1.5])
    (batch,) = features.dataset(store, np.arange(4), y, "train").__getitems__([0, 1, 2, 3])
    torch.manual_seed(0)
    backbone = RTLanguageModel(features.facts()["vocab_size"], pad_id=0, **TINY)
    model = RegressionTransformer(backbone, optimizer=torch.optim.AdamW)
    model.fit_range(y)
    model.log = lambda *args, **kwargs: None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for step in range(150):
        optimizer.zero_grad()
        model.training_step(batch, step).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        prediction = model.predict_batch(batch)
    assert not prediction.flags["malformed"].any()
    assert prediction.mean.tolist() == pytest.approx(y.tolist(), abs=0.002)  # 3 decimals
    batch.y = None  # the label is not in the input: the same prediction without it
    with torch.no_grad():
        torch.testing.assert_close(model.predict_batch(batch).mean, prediction.mean)


def test_save_and_load_are_exact(tmp_path: Path, store: FeatureStore) -> None:
    features = RTFeatures()
    features.fit(store, np.arange(4))
    (batch,) = features.dataset(store, np.arange(4), None, "test").__getitems__([0, 1, 2, 3])
    torch.manual_seed(0)
    model = RTLanguageModel(features.facts()["vocab_size"], pad_id=0, **TINY).eval()
    model.save_pretrained(tmp_path)
    features.tokenizer.save(str(tmp_path / "tokenizer.json"))

    loaded = RTLanguageModel(features.facts()["vocab_size"], pad_id=0, pretrained=str(tmp_path))
    rt = RegressionTransformer(model, torch.optim.AdamW).eval()
    rt_loaded = RegressionTransformer(loaded.eval(), torch.optim.AdamW).eval()
    with torch.no_grad():
        assert torch.equal(rt.block_logits(batch, False), rt_loaded.block_logits(batch, False))
    state, state_loaded = model.state_dict(), loaded.state_dict()
    assert state.keys() == state_loaded.keys()
    assert all(torch.equal(state[k], state_loaded[k]) for k in state)

    encoder = RTEncoder(0, pad_id=0, pretrained=str(tmp_path))  # the LM head is dropped
    for name, tensor in encoder.xlnet.state_dict().items():
        assert torch.equal(tensor, state[f"xlnet.transformer.{name}"])

    reread = RTFeatures(tokenizer=str(tmp_path))
    reread.fit(store, np.array([0]))  # the saved tokenizer, not one of these molecules
    assert reread.tokenizer.get_vocab() == features.tokenizer.get_vocab()
    with pytest.raises(ValueError, match="not a Regression Transformer tokenizer"):
        from oodmol.data.tokens import atom_level_tokenizer

        atom_level_tokenizer(["CCO"]).save(str(tmp_path / "tokenizer.json"))
        RTFeatures(tokenizer=str(tmp_path)).fit(store, np.array([0]))
