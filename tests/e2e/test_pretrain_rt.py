"""oodmol pretrain model=rt: the permutation-LM corruption's known properties (targets
inside the molecule only, at the rate its windows give, a random strict order that
perm_mask enforces in the model too), and end to end: pretraining a tiny RT on 64 SMILES,
then `train.py model=rt|rt_regression model.pretrained=<out>`, whose encoder starts from
exactly the pretrained weights."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from e2e_helpers import QUIET, TinyTask
from hydra.utils import instantiate
from safetensors.torch import load_file

from oodmol.config import compose_config
from oodmol.data.batches import TokenBatch
from oodmol.data.rt_tokens import FIXED_TOKENS, RTFeatures
from oodmol.models.backbones.rt import RTLanguageModel
from oodmol.models.rt.pretraining import MOLECULE_START, RTPermutationLM, SpanPermutation
from oodmol.pretraining.masking import IGNORE

SMILES = ["CC(C)(C)c1cc(C=NO)c(O)c(C(C)(C)C)c1", "O=C(O)c1ccc([N+](=O)[O-])cc1Cl", "CCBr"]
TINY = dict(layers=2, hidden=16, heads=2, intermediate=32, dropout=0.0)


def rt_batch(smiles: list[str]) -> tuple[RTFeatures, TokenBatch]:
    features = RTFeatures()
    features.fit_smiles(smiles)
    tokens = features.token_set(smiles, None, "train")
    return features, tokens.__getitems__(list(range(len(tokens))))[0]


def corrupt(smiles: list[str], seed: int = 0, probability: float = 0.4):
    features, batch = rt_batch(smiles)
    corruption = SpanPermutation(features.tokenizer, probability)
    generator = torch.Generator().manual_seed(seed)
    return batch, corruption(batch.input_ids, batch.attention_mask, generator)


def lm_logits(model: RTPermutationLM, input_ids: torch.Tensor, *masks: torch.Tensor,
           **named: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The LM's logits of the targets, which the objective turns into its loss."""
    return RTLanguageModel.forward(model, input_ids, *masks, **named)


def targets_of(out: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B, L] bool: the positions target_mapping picks."""
    return out["target_mapping"].sum(dim=1).bool()


def test_targets_are_molecule_tokens_labelled_with_themselves() -> None:
    batch, out = corrupt(SMILES * 50)
    ids = batch.input_ids
    chosen = targets_of(out)
    molecule = (batch.attention_mask == 1) & (ids >= len(FIXED_TOKENS))
    molecule[:, :MOLECULE_START] = False
    assert molecule.any(dim=1).all()
    assert not (chosen & ~molecule).any()  # [CLS], <prop>, the block, |, [SEP], padding
    assert chosen.any(dim=1).all()
    mapping = out["target_mapping"]
    assert set(mapping.unique().tolist()) == {0.0, 1.0}
    assert (mapping.sum(dim=2) <= 1).all()  # a row picks one position or none
    assert (mapping.sum(dim=1) <= 1).all()  # a position is picked once at most
    picked = mapping.sum(dim=2).bool()
    labels = out["labels"]
    assert torch.equal(labels == IGNORE, ~picked)
    positions = mapping.argmax(dim=2)
    assert torch.equal(labels[picked], ids.gather(1, positions)[picked])
    assert torch.equal(out["input_ids"], ids)  # XLNet's query stream hides the target


def test_perm_mask_is_a_random_strict_order_over_the_targets() -> None:
    _, out = corrupt(SMILES * 20)
    hidden = out["perm_mask"].bool()
    chosen = targets_of(out)
    orders = set()
    for row in range(len(chosen)):
        t = chosen[row]
        # nobody is hidden a non-target; a non-target is hidden every target
        assert not hidden[row][:, ~t].any()
        assert hidden[row][~t][:, t].all()
        among = hidden[row][t][:, t]
        assert among.diagonal().all()  # a target never sees itself
        seen = (~among).sum(dim=1)  # how many targets each one sees: its rank
        assert sorted(seen.tolist()) == list(range(int(t.sum())))
        # i sees j exactly when j comes earlier: a strict total order
        assert torch.equal(~among, seen.unsqueeze(1) > seen.unsqueeze(0))
        orders.add((row % len(SMILES), tuple(seen.tolist())))
    assert len(orders) > 2 * len(SMILES)  # the order is drawn, not the same each time


@pytest.mark.parametrize(("probability", "windows"), [(0.4, 68), (0.15, 184)])
def test_spans_cover_the_molecule_at_the_rate_of_their_windows(probability, windows) -> None:
    # spans of 1…7 tokens, each in a window of int(span / p): a long molecule has
    # mean(span) / mean(window) of its tokens as targets (windows: their sum over 1…7)
    _, out = corrupt(["C" * 300] * 40, probability=probability)
    rate = targets_of(out).sum() / (300 * 40)
    assert abs(rate - 4 / (windows / 7)) < 0.005, rate


def test_a_tiny_molecule_still_has_a_target() -> None:
    _, out = corrupt(["C", "CC"] * 100, probability=0.01)
    assert (targets_of(out).sum(dim=1) == 1).all()


def test_the_corruption_is_a_function_of_the_generator_seed() -> None:
    _, first = corrupt(SMILES, seed=3)
    _, again = corrupt(SMILES, seed=3)
    _, other = corrupt(SMILES, seed=4)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(targets_of(first), targets_of(other))


def test_only_an_rt_tokenizer_is_taken() -> None:
    from oodmol.data.tokens import atom_level_tokenizer

    with pytest.raises(ValueError, match="Regression Transformer tokenizer"):
        SpanPermutation(atom_level_tokenizer(SMILES), 0.4)


def test_in_the_model_a_target_sees_earlier_targets_only() -> None:
    """Changing a target's token leaves the logits of itself and of the targets ranked
    before it as they were; a later target's logits change."""
    torch.manual_seed(0)
    features, batch = rt_batch(SMILES[:1])
    corruption = SpanPermutation(features.tokenizer, 0.4)
    out = corruption(batch.input_ids, batch.attention_mask, torch.Generator().manual_seed(1))
    model = RTPermutationLM(features.tokenizer.get_vocab_size(), 0, **TINY).eval()
    inputs = {k: out[k] for k in ("attention_mask", "perm_mask", "target_mapping")}
    positions = out["target_mapping"][0].argmax(dim=1)
    rank = (~out["perm_mask"][0].bool()[positions][:, positions]).sum(dim=1)
    assert len(rank) >= 3
    middle = int((rank == len(rank) // 2).nonzero())
    changed = out["input_ids"].clone()
    changed[0, positions[middle]] = len(FIXED_TOKENS)  # another molecule token
    assert not torch.equal(changed, out["input_ids"])
    with torch.no_grad():
        before = lm_logits(model, out["input_ids"], **inputs)[0]
        after = lm_logits(model, changed, **inputs)[0]
    same = (before - after).abs().amax(dim=1) < 1e-6
    assert torch.equal(same, rank <= rank[middle])


def test_the_loss_is_the_cross_entropy_of_the_targets() -> None:
    torch.manual_seed(0)
    features, batch = rt_batch(SMILES)
    out = SpanPermutation(features.tokenizer, 0.4)(
        batch.input_ids, batch.attention_mask, torch.Generator().manual_seed(0)
    )
    model = RTPermutationLM(features.tokenizer.get_vocab_size(), 0, **TINY).eval()
    with torch.no_grad():
        loss = model(**out)
        logits = lm_logits(
            model, out["input_ids"], out["attention_mask"], out["perm_mask"], out["target_mapping"]
        )
    picked = out["labels"] != IGNORE
    chosen = logits[picked].log_softmax(dim=-1)
    expected = -chosen.gather(1, out["labels"][picked].unsqueeze(1)).mean()
    assert torch.allclose(loss, expected, atol=1e-6)


# --- end to end ---------------------------------------------------------------------

SIZES = [
    f"model.module.backbone.{s}" for s in ("layers=2", "heads=2", "hidden=16", "intermediate=32")
]
MODELS = ("rt", "rt_regression")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyTask]:
    task = TinyTask.create(tmp_path_factory.mktemp("pretrain_rt"))
    yield task
    task.close()


@pytest.fixture(scope="module")
def pretrained(tiny) -> dict[str, Path]:
    """Each model pretrained on 64 SMILES, then fine-tuned from its folder."""
    corpus = tiny.root / "corpus.smi"
    corpus.write_text("\n".join(tiny.molecules["smiles"][:64]) + "\n")
    outs = {}
    for model in MODELS:
        out = tiny.root / f"pretrained-{model}"
        pretrain = ["-m", "oodmol.cli", "pretrain", f"model={model}", f"corpus={corpus}",
                    f"out={out}", "exclude=[]", "max_epochs=2", "batch_size=16", "lr=1e-3",
                    *SIZES, *QUIET]  # fmt: skip
        train = ["train.py", f"model={model}", f"model.pretrained={out}", *tiny.task_args(),
                 "max_molecules=64", "trainer.max_epochs=1", *QUIET,
                 f"hydra.run.dir={tiny.root / f'finetuned-{model}'}"]  # fmt: skip
        tiny.submit_chain((f"pretrain-{model}", pretrain), (f"finetune-{model}", train))
        outs[model] = out
    return outs


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_pretrain_then_finetune_starts_from_the_pretrained_encoder(tiny, pretrained, model):
    tiny.result(f"pretrain-{model}").ok()
    out = pretrained[model]
    summary = json.loads((out / "pretrain_summary.json").read_text())
    assert (summary["corpus"]["train"], summary["corpus"]["holdout"]) == (61, 3)
    assert summary["steps"] == 2 * 4  # 61 molecules in batches of 16, two epochs
    assert summary["loss"]["holdout_final"] < summary["loss"]["holdout_start"]
    tiny.result(f"finetune-{model}").ok()
    metrics = json.loads((tiny.root / f"finetuned-{model}" / "metrics.json").read_text())
    assert metrics["status"] == "complete"
    # the encoder fine-tuning builds (train.py's config, the same overrides) is the saved one
    cfg = compose_config("train", [f"model={model}", f"model.pretrained={out}", *tiny.task_args()])
    features: RTFeatures = instantiate(cfg.model.features)
    features.fit_smiles([])
    assert features.tokenizer.get_vocab_size() == summary["tokenizer"]["vocab_size"]
    assert metrics["data"]["vocab_size"] == summary["tokenizer"]["vocab_size"]
    facts = features.facts()
    sizes = {k.removeprefix("backbone."): facts[v.name] for k, v in cfg.model.statistics.items()}
    backbone = instantiate(cfg.model.module.backbone, **sizes)
    saved = load_file(str(out / "model.safetensors"))
    encoder = {f"transformer.{k}": v for k, v in backbone.transformer.state_dict().items()}
    assert encoder and set(encoder) <= set(saved)
    for name, tensor in encoder.items():
        assert torch.equal(tensor, saved[name]), name
