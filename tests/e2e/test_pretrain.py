"""oodmol pretrain: BERT masking's known properties, the removal of test molecules from a
corpus (known answers on the tiny task), experiment=boom_pretraining's sweep, and end to
end: pretraining a tiny model on 64 SMILES, then `train.py model.pretrained=<out>`, whose
encoder starts from exactly the pretrained weights."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from e2e_helpers import QUIET, TinyTask, load_tiny_split
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import OmegaConf
from safetensors.torch import load_file
from smiles_helpers import save_tiny_roberta
from transformers import RobertaTokenizerFast

from oodmol.config import CONFIG_DIR_ENV, compose_config, config_dir
from oodmol.data.tokens import TokenFeatures, atom_level_tokenizer
from oodmol.overrides import names_of
from oodmol.pretraining.corpus import build_corpus, canonical_smiles, remove_test_molecules
from oodmol.pretraining.masking import IGNORE, BertMasking

SMILES = ["CC(C)(C)c1cc(C=NO)c(O)c(C(C)(C)C)c1", "O=C(O)c1ccc([N+](=O)[O-])cc1Cl", "CCBr"]


def masked(probability: float = 0.15, seed: int = 0, copies: int = 400):
    """A batch of `copies` × SMILES (padded), BERT-masked with a seeded generator."""
    tokenizer = atom_level_tokenizer(SMILES)
    features = TokenFeatures()
    features.tokenizer = tokenizer
    tokens = features.token_set(SMILES * copies, None, "train")
    batch = tokens.__getitems__(list(range(len(tokens))))[0]
    masking = BertMasking(tokenizer, probability)
    out = masking(batch.input_ids, batch.attention_mask, torch.Generator().manual_seed(seed))
    return batch, out, masking


def test_masking_chooses_ordinary_tokens_at_the_rate_and_labels_them_alone() -> None:
    batch, out, masking = masked()
    ids, labels = batch.input_ids, out["labels"]
    special = torch.isin(ids, masking.special_ids) | (batch.attention_mask == 0)
    chosen = labels != IGNORE
    assert not (chosen & special).any()  # [CLS], [SEP], padding: never chosen
    assert torch.equal(out["input_ids"][special], ids[special])
    assert torch.equal(labels[chosen], ids[chosen])  # the label is the original token
    assert torch.equal(out["input_ids"][~chosen], ids[~chosen])  # the rest untouched
    # each token with probability p, and one token of a molecule none was drawn from:
    # E[chosen] = n·p + (1 − p)^n for a molecule of n ordinary tokens
    n = (~special).sum(dim=1).double()
    expected = (n * 0.15 + 0.85**n).sum() / n.sum()
    rate = chosen.sum() / n.sum()
    assert abs(rate - expected) < 0.01, (rate, expected)
    assert chosen.any(dim=1).all()  # every molecule has a label
    assert torch.equal(out["attention_mask"], batch.attention_mask)


def test_masking_replaces_80_10_10_with_ordinary_tokens() -> None:
    batch, out, masking = masked()
    chosen = out["labels"] != IGNORE
    now, before = out["input_ids"][chosen], batch.input_ids[chosen]
    as_mask = now == masking.mask_id
    kept = now == before
    randomised = ~as_mask & ~kept
    n = chosen.sum()
    assert abs(as_mask.sum() / n - 0.8) < 0.03
    # a random draw may hit the token itself: "kept" is 10 % plus 1/|ordinary| of 10 %
    assert abs((kept.sum() + randomised.sum()) / n - 0.2) < 0.03
    assert randomised.sum() / n > 0.07
    assert not torch.isin(now[randomised], masking.special_ids).any()


def test_masking_is_a_function_of_the_generator_seed() -> None:
    _, first, _ = masked(seed=3, copies=5)
    _, again, _ = masked(seed=3, copies=5)
    _, other, _ = masked(seed=4, copies=5)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["labels"], other["labels"])


def test_a_model_without_objective_or_a_corpus_that_is_nothing_is_refused(
    capsys, tmp_path: Path
) -> None:
    from oodmol.cli.pretrain import main

    out = f"out={tmp_path / 'out'}"
    assert main(["model=mlp", "corpus=x.smi", out]) == 2
    assert "model=mlp has no pretraining objective" in capsys.readouterr().err
    assert main(["model=modernbert", out]) == 2
    assert "corpus=... is required" in capsys.readouterr().err
    assert main(["model=modernbert", "corpus=absent.smi", "exclude=qm9_homo", out]) == 2
    assert "'absent.smi', neither a file nor a task" in capsys.readouterr().err
    (tmp_path / "x.smi").write_text("CCO\nCCN\n")
    assert main(["model=modernbert", f"corpus={tmp_path}/x.smi", "exclude=qm9_hom", out]) == 2
    assert "'qm9_hom', neither a file nor a task" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_canonical_smiles_reports_invalid_ones() -> None:
    valid, report = canonical_smiles(["OCC", "C1CC(", "C(C)(C)(C)(C)C", "c1ccccc1"])
    assert valid == ["CCO", "c1ccccc1"]
    assert report["invalid"] == 2
    assert [e["position"] for e in report["invalid_examples"]] == [1, 2]


def test_test_molecules_are_removed_by_structure_whatever_their_stereo() -> None:
    corpus, _ = canonical_smiles(["CCO", "OCC", "C[C@H](N)O", "c1ccccc1", "CCN"])
    tests = {"a": ["CC(N)O"], "b": ["CCO", "CC(N)O", "CCCl"]}
    kept, counts = remove_test_molecules(corpus, tests)
    assert kept == ["c1ccccc1", "CCN"]
    assert counts == {
        "duplicates": 1,
        "removed_test_molecules": 2,
        "removed_by_task": {"a": 1, "b": 2},
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyTask]:
    task = TinyTask.create(tmp_path_factory.mktemp("pretrain"))
    tree = task.root / "configs"
    shutil.copytree(config_dir(), tree)
    (tree / "task" / "tiny.yaml").write_text(
        "_target_: oodmol.data.task.csv_task\n"
        f"path: {task.csv}\ntarget_column: y\nname: tiny\nood_size: 20\n"
    )
    task.env[CONFIG_DIR_ENV] = str(tree)
    yield task
    task.close()


def test_a_task_corpus_is_its_training_and_validation_molecules(tiny, monkeypatch) -> None:
    monkeypatch.setenv(CONFIG_DIR_ENV, tiny.env[CONFIG_DIR_ENV])
    data, split = load_tiny_split(tiny)

    def smiles(*sets: str) -> set[str]:
        return {s for name in sets for s in data.table.smiles[data.table.rows_of(split.sets[name])]}

    corpus = build_corpus(["tiny"], [], "ood", tiny.data_dir)
    assert set(corpus.smiles) == smiles("train", "val")
    assert corpus.report["removed_test_molecules"] == 0
    # a file of every molecule of the task, with `exclude` naming it: its test sets go
    every = tiny.root / "every.smi"
    every.write_text("\n".join([*tiny.molecules["smiles"], "not-a-smiles"]) + "\n")
    corpus = build_corpus(str(every), ["tiny"], "ood", tiny.data_dir)
    assert set(corpus.smiles) == smiles("train", "val")
    assert corpus.report["removed_test_molecules"] == len(smiles("id", "ood")) > 0
    assert corpus.report["invalid"] == 1
    assert corpus.report["invalid_examples"][0]["smiles"] == "not-a-smiles"
    assert build_corpus(str(every), [], "ood", tiny.data_dir).report["molecules"] == len(data.table)


def test_default_exclusion_is_every_task_of_the_boom_grid() -> None:
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        grid = compose("train", ["experiment=boom"], return_hydra_config=True)
    tasks = str(grid.hydra.sweeper.params.task).split(",")
    exclude = compose_config("pretrain", ["corpus=x", "out=y"]).exclude
    assert sorted(names_of(exclude)) == sorted(tasks) and len(tasks) == 11


def test_boom_pretraining_sweeps_every_smiles_model_and_task_scratch_and_pretrained() -> None:
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("train", ["experiment=boom_pretraining"], return_hydra_config=True)
        params = cfg.hydra.sweeper.params
        parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
        jobs = BasicSweeper.split_arguments(parsed, None)[0]
        assert len(jobs) == 4 * 11 * 2 * 3
        starts = {}
        for job in jobs:
            if "seed=0" in job and "task=qm9_homo" in job:
                run = compose("train", ["experiment=boom_pretraining", *job])
                starts.setdefault(run.model.name, []).append(run.model.pretrained)
    assert starts == {
        "chemberta": [None, "seyonec/PubChem10M_SMILES_BPE_450k"],
        "modernbert": [None, "./pretrained/modernbert"],
        "molformer": [None, "ibm/MoLFormer-XL-both-10pct"],
        "rt": [None, "./pretrained/rt"],
    }


# --- end to end ---------------------------------------------------------------------

TINY = [
    f"model.module.backbone.{s}" for s in ("layers=2", "heads=2", "hidden=16", "intermediate=32")
]
ENCODER_PREFIX = {"chemberta": "roberta.", "modernbert": "model.", "molformer": ""}
# run → (model, its settings): tiny models from scratch, and ChemBERTa pretrained on
# from a tiny hub-layout RoBERTa with its own byte-level BPE tokenizer
RUNS = {
    "chemberta": ("chemberta", TINY),
    "modernbert": ("modernbert", TINY),
    "molformer": ("molformer", TINY),
    "chemberta-continued": ("chemberta", []),
}


def encoder_state(model: str, backbone: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The backbone's encoder tensors under the names a saved pretraining folder has."""
    if model == "molformer":
        return backbone.encoder_state_dict()
    return {ENCODER_PREFIX[model] + k: v for k, v in backbone.encoder.state_dict().items()}


@pytest.fixture(scope="module")
def pretrained(tiny) -> dict[str, Path]:
    """Each model pretrained on 64 SMILES (one invalid line too), then fine-tuned."""
    corpus = tiny.root / "corpus.smi"
    corpus.write_text("\n".join([*tiny.molecules["smiles"][:64], "C1CC("]) + "\n")
    roberta = save_tiny_roberta(tiny.root / "tiny-roberta")
    outs = {}
    for run, (model, settings) in RUNS.items():
        out = tiny.root / f"pretrained-{run}"
        start = [f"model.pretrained={roberta}"] if run == "chemberta-continued" else []
        pretrain = ["-m", "oodmol.cli", "pretrain", f"model={model}", f"corpus={corpus}",
                    f"out={out}", "exclude=[]", "max_epochs=2", "batch_size=16", "lr=1e-3",
                    *settings, *start, *QUIET]  # fmt: skip
        train = ["train.py", f"model={model}", f"model.pretrained={out}", *tiny.task_args(),
                 "max_molecules=64", "trainer.max_epochs=1", *QUIET,
                 f"hydra.run.dir={tiny.root / f'finetuned-{run}'}"]  # fmt: skip
        tiny.submit_chain((f"pretrain-{run}", pretrain), (f"finetune-{run}", train))
        outs[run] = out
    resumed = tiny.root / "resumed"
    again = ["-m", "oodmol.cli", "pretrain", "model=molformer", f"corpus={corpus}",
             f"out={resumed}", "exclude=[]", "batch_size=16", *TINY, *QUIET]  # fmt: skip
    tiny.submit_chain(
        ("resume-first", [*again, "max_epochs=1"]),
        ("resume-second", [*again, "max_epochs=2", "resume=true"]),
    )
    outs["resumed"] = resumed
    return outs


@pytest.mark.slow
def test_pretraining_resumes_from_its_last_checkpoint(tiny, pretrained) -> None:
    assert '"steps": 4,' in tiny.result("resume-first").ok().stdout  # its summary, printed
    tiny.result("resume-second").ok()
    second = json.loads((pretrained["resumed"] / "pretrain_summary.json").read_text())
    assert (second["steps"], second["epochs"], second["resumed"]) == (8, 2, True)


@pytest.mark.slow
@pytest.mark.parametrize("run", list(RUNS))
def test_pretrain_then_finetune_starts_from_the_pretrained_encoder(tiny, pretrained, run):
    model = RUNS[run][0]
    tiny.result(f"pretrain-{run}").ok()
    out = pretrained[run]
    summary = json.loads((out / "pretrain_summary.json").read_text())
    corpus = summary["corpus"]
    assert (corpus["read"], corpus["invalid"], corpus["molecules"]) == (65, 1, 64)
    assert (corpus["train"], corpus["holdout"]) == (61, 3)
    assert summary["steps"] == 2 * 4  # 61 molecules in batches of 16, two epochs
    assert summary["loss"]["holdout_final"] < summary["loss"]["holdout_start"]
    tiny.result(f"finetune-{run}").ok()
    metrics = json.loads((tiny.root / f"finetuned-{run}" / "metrics.json").read_text())
    assert metrics["status"] == "complete"
    # the encoder fine-tuning builds (train.py's config, the same overrides) is the saved one
    cfg = compose_config("train", [f"model={model}", f"model.pretrained={out}", *tiny.task_args()])
    features: TokenFeatures = instantiate(cfg.model.features)
    features.fit_smiles([])
    vocab = features.tokenizer.get_vocab()
    assert len(vocab) == summary["tokenizer"]["vocab_size"]
    if run == "chemberta-continued":  # the pretrained model's own BPE vocabulary, kept
        hub = RobertaTokenizerFast.from_pretrained(str(tiny.root / "tiny-roberta"))
        assert vocab == hub.get_vocab()
    facts = features.facts()
    sizes = {k.removeprefix("backbone."): facts[v.name] for k, v in cfg.model.statistics.items()}
    backbone = instantiate(cfg.model.module.backbone, **sizes)
    saved = load_file(str(out / "model.safetensors"))
    state = encoder_state(model, backbone)
    assert state and set(state) <= set(saved)
    for name, tensor in state.items():
        assert torch.equal(tensor, saved[name]), name
    assert OmegaConf.select(cfg, "model.pretrained") == str(out)
