"""SMILES tokens: known answers for the atom-level tokenizer (charges, two-digit ring
closures, bracket atoms, Cl/Br), the vocabulary of the training molecules only, dynamic
padding and length-grouped batches, the tokenizer beside the cache and in checkpoints,
and featurisation workers that never fork the tokenizer's threads."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from oodmol.data.batches import TokenBatch
from oodmol.data.featurize.smiles import SmilesText
from oodmol.data.sampling import EpochShuffle
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.data.tokens import TokenFeatures, atom_level_tokenizer


def tokens(smiles: str) -> list[str]:
    return atom_level_tokenizer([smiles]).encode(smiles).tokens


@pytest.mark.parametrize(
    "smiles, expected",
    [
        ("CCl", ["C", "Cl"]),
        ("BrCCBr", ["Br", "C", "C", "Br"]),
        ("C[NH3+]", ["C", "[NH3+]"]),  # a bracket atom with its charge is one token
        ("[O-]C(=O)c1ccccc1", ["[O-]", "C", "(", "=", "O", ")", "c", "1", *"ccccc", "1"]),
        ("C1CC%12CC1CC%12", ["C", "1", "C", "C", "%12", "C", "C", "1", "C", "C", "%12"]),
        ("F/C=C/[C@@H](N)O", ["F", "/", "C", "=", "C", "/", "[C@@H]", "(", "N", ")", "O"]),
        ("[2H]C#N.[Na+]", ["[2H]", "C", "#", "N", ".", "[Na+]"]),
    ],
)  # fmt: skip
def test_atom_level_tokens(smiles: str, expected: list[str]) -> None:
    assert tokens(smiles) == ["[CLS]", *expected, "[SEP]"]


def test_vocabulary_is_special_tokens_then_by_count() -> None:
    vocabulary = atom_level_tokenizer(["CCO", "CCN", "C[NH3+]"]).get_vocab()
    assert [t for t, _ in sorted(vocabulary.items(), key=lambda kv: kv[1])] == [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "C", "N", "O", "[NH3+]",
    ]  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> FeatureStore:
    smiles = ["CCO", "c1ccccc1CCCCCC", "CCN", "CCCl", "C", "CCBr"]
    table = MoleculeTable("tiny", np.arange(6), np.array(smiles), {"y": np.arange(6.0)})
    return FeatureStore.build_or_open(SmilesText(), table, tmp_path, n_jobs=1, progress=False)


def test_unseen_tokens_are_unknown_and_counted(store: FeatureStore) -> None:
    features = TokenFeatures()
    facts = features.fit(store, np.array([0, 1, 2]))  # Cl and Br only outside training
    assert facts["vocab_size"] == features.facts()["vocab_size"] == 5 + 5  # C c O N 1
    assert features.facts()["pad_id"] == 0 and features.facts()["mask_id"] == 4
    features.dataset(store, np.array([3, 4, 5]), None, "ood")
    assert features.imputed["ood"] == 2  # one Cl, one Br


def test_batches_are_padded_to_their_longest_molecule(store: FeatureStore) -> None:
    features = TokenFeatures()
    features.fit(store, np.arange(6))
    dataset = features.dataset(store, np.arange(6), np.arange(6.0), "train")
    (batch,) = dataset.__getitems__([0, 4])  # CCO (5 tokens with CLS/SEP) and C (3)
    assert isinstance(batch, TokenBatch) and len(batch) == 2
    assert batch.input_ids.shape == (2, 5)
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch.input_ids[1, 3:].tolist() == [0, 0]  # [PAD]
    assert batch.y.tolist() == [0.0, 4.0]


def test_tokenizer_is_saved_beside_the_cache_and_in_the_state(store: FeatureStore) -> None:
    features = TokenFeatures()
    facts = features.fit(store, np.arange(6))
    saved = Path(facts["tokenizer"])
    assert saved.parent == store.path.parent and saved.name.endswith(".tokenizer.json")
    reloaded = TokenFeatures(tokenizer=str(saved))
    reloaded.fit(store, np.arange(2))  # a given tokenizer: not rebuilt from these molecules
    restored = TokenFeatures()
    restored.load_state_dict(features.state_dict())
    for other in (reloaded, restored):
        a, b = (f.dataset(store, np.arange(6), None, "x") for f in (features, other))
        assert all(torch.equal(x, y) for x, y in zip(a.ids, b.ids, strict=True))


def test_non_isomeric_tokens_drop_stereo_and_isotopes(tmp_path: Path) -> None:
    smiles = ["C[C@H](N)O", "F/C=C/F", "[13CH4]", "CCO"]
    table = MoleculeTable("stereo", np.arange(4), np.array(smiles), {"y": np.zeros(4)})
    store = FeatureStore.build_or_open(SmilesText(), table, tmp_path, n_jobs=1, progress=False)
    features = TokenFeatures(isomeric=False)
    features.fit(store, np.arange(4))
    vocabulary = features.tokenizer.get_vocab()
    assert not {"[C@H]", "/", "[13CH4]"} & set(vocabulary)
    (batch,) = features.dataset(store, np.arange(4), None, "x").__getitems__([0, 2])
    tokens = [[features.tokenizer.id_to_token(i) for i in row] for row in batch.input_ids]
    assert tokens[0] == ["[CLS]", "C", "C", "(", "N", ")", "O", "[SEP]"]  # CC(N)O
    assert tokens[1][:3] == ["[CLS]", "C", "[SEP]"]  # methane, its isotope dropped
    isomeric = TokenFeatures()
    isomeric.fit(store, np.arange(4))
    assert {"/", "[13CH4]"} <= set(isomeric.tokenizer.get_vocab())  # the default keeps them


def test_length_grouped_batches_are_of_like_lengths_and_resume() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 200, size=1000)
    sampler = EpochShuffle(range(1000), seed=3, lengths=lengths, batch_size=32)
    order = list(sampler)
    assert sorted(order) == list(range(1000))
    batches = [order[i : i + 32] for i in range(0, 1000, 32)]
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    shuffled = list(EpochShuffle(range(1000), seed=3))
    unsorted = np.mean([np.ptp(lengths[shuffled[i : i + 32]]) for i in range(0, 1000, 32)])
    assert spread < unsorted / 5  # padding nearly gone
    assert order != list(EpochShuffle(range(1000), seed=4, lengths=lengths, batch_size=32))
    sampler.resume_at(0, 5 * 32)  # five batches trained: the rest comes as it would have
    assert list(sampler) == order[5 * 32 :]


@pytest.mark.slow  # starts a Python process
@pytest.mark.parametrize(("parallelism", "method"), [("true", "forkserver"), (None, "fork")])
def test_workers_do_not_fork_the_tokenizer_threads(tmp_path: Path, parallelism, method) -> None:
    """Once this process has tokenised (the library's thread pool has run), a worker pool
    must not fork it: with TOKENIZERS_PARALLELISM=true, forked workers that tokenise
    deadlock (seen here with the fork start method). Pools then come from a fork
    server; where the user set nothing, the pool is turned off and workers are forked
    (no fork server's seconds of imports per worker), without the library's warning.
    Either way the work completes with the answer of a serial run."""
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent("""
            from oodmol.data.tokens import atom_level_tokenizer
            from oodmol.parallel import process_map, start_method

            SMILES = ["C" * (i % 7 + 1) + "O" for i in range(4000)]
            TOKENIZER = atom_level_tokenizer(SMILES)
            TOKENIZER.encode_batch(SMILES)  # the thread pool runs


            def tokenised(n: int) -> int:
                return sum(len(e.ids) for e in TOKENIZER.encode_batch(SMILES[:n]))


            if __name__ == "__main__":
                jobs = process_map(tokenised, [200] * 8, total=8, desc="", n_jobs=2, progress=False)
                print(start_method(), sum(jobs), 8 * tokenised(200))
        """)
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={
            **{k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"},
            **({"TOKENIZERS_PARALLELISM": parallelism} if parallelism else {}),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    used, parallel, serial = result.stdout.split()
    assert used == method and parallel == serial
    assert "huggingface/tokenizers" not in result.stderr
