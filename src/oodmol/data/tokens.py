"""SMILES as tokens for transformer models, with Hugging Face's `tokenizers`.

The feature cache holds each molecule's canonical SMILES (`SmilesText`); `TokenFeatures`
tokenises them in the training process, in bulk (the library's own threads), never in a
forked worker. Its tokenizer is either a pretrained model's (`tokenizer=<tokenizer.json>`)
or the atom-level one: the usual SMILES regular expression (Schwaller et al. 2019) splits
bracket atoms, two-letter elements and two-digit ring closures, and a word-level
vocabulary of the *training* molecules' tokens, so a test molecule's unseen token becomes
[UNK] (counted, like an imputed value). The tokenizer is saved as `tokenizer.json` beside
the cache and travels in every checkpoint.

Batches are padded to their own longest molecule, with an attention mask (`TokenBatch`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from tokenizers import Regex, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Split
from tokenizers.processors import TemplateProcessing
from torch.utils.data import Dataset

from oodmol.data.batches import TokenBatch
from oodmol.data.features import BatchedDataset, FeatureSet
from oodmol.data.store import FeatureStore
from oodmol.io import atomic_write_text
from oodmol.pretrained import resolve_pretrained

log = logging.getLogger(__name__)
SMILES_PATTERN = (
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$"
    r"|%[0-9]{2}|[0-9])"
)
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD, UNK, CLS, SEP, MASK = SPECIAL_TOKENS
# the same roles in RoBERTa's byte-level BPE vocabularies (ChemBERTa's)
ROBERTA_TOKENS = dict(zip(SPECIAL_TOKENS, ("<pad>", "<unk>", "<s>", "</s>", "<mask>"), strict=True))


def atom_level_tokenizer(smiles: list[str]) -> Tokenizer:
    """A word-level tokenizer over the regex tokens of `smiles` (special tokens first,
    then by decreasing count, ties alphabetical), wrapping every molecule in [CLS] … [SEP]."""
    splitter = _splitter()
    counts = Counter(token for s in smiles for token, _ in splitter.pre_tokenize_str(s))
    ordered = sorted(counts, key=lambda token: (-counts[token], token))
    vocabulary = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *ordered])}
    tokenizer = Tokenizer(WordLevel(vocabulary, unk_token=UNK))
    tokenizer.pre_tokenizer = splitter
    tokenizer.post_processor = TemplateProcessing(
        single=f"{CLS} $A {SEP}", special_tokens=[(CLS, vocabulary[CLS]), (SEP, vocabulary[SEP])]
    )
    return tokenizer


def _splitter() -> Split:
    return Split(Regex(SMILES_PATTERN), behavior="isolated")


class TokenFeatures(FeatureSet):
    """Token ids of each molecule's SMILES, batched with dynamic padding.

    `tokenizer`: a `tokenizer.json`, or a pretrained model's folder or hub id
    (`oodmol.pretrained`; a folder without `tokenizer.json`, such as ChemBERTa's
    vocab.json + merges.txt, is read by `transformers`); None builds the atom-level
    tokenizer from the training molecules. `max_length` truncates longer molecules
    (counted per set in `truncated`). `isomeric=False` tokenises the canonical SMILES
    without stereo and isotope marks (RDKit's isomericSmiles=False, as MoLFormer was
    trained)."""

    def __init__(
        self, tokenizer: str | None = None, max_length: int | None = None, isomeric: bool = True
    ) -> None:
        self.source = tokenizer
        self.max_length = max_length
        self.isomeric = isomeric
        self.tokenizer: Tokenizer | None = None
        self.imputed: dict[str, int] = {}  # [UNK] tokens per set: tokens never seen in training
        self.truncated: dict[str, int] = {}

    def fit(self, store: FeatureStore, train_ids: np.ndarray) -> dict:
        self.fit_smiles(_smiles(store, train_ids) if self.source is None else [])
        saved = self._save_beside(store)
        return {"vocab_size": self.tokenizer.get_vocab_size(), "tokenizer": str(saved)}

    def fit_smiles(self, smiles: list[str]) -> None:
        """The tokenizer: the pretrained one, or the atom-level one of the training
        molecules' canonical `smiles` (also what `oodmol pretrain` builds from its corpus)."""
        if self.source is None:
            self.tokenizer = atom_level_tokenizer(self.texts(smiles))
        else:
            self.tokenizer = pretrained_tokenizer(self.source)
            self.tokenizer.no_padding()  # batches pad themselves; `max_length` truncates
            self.tokenizer.no_truncation()

    def _save_beside(self, store: FeatureStore) -> Path:
        text = self.tokenizer.to_str()
        key = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = store.path.with_name(f"{store.path.stem}.{key}.tokenizer.json")
        if not path.is_file():
            try:
                atomic_write_text(path, text)
            except OSError as error:  # a read-only data folder: the checkpoint keeps it
                log.info("tokenizer not saved beside the cache (%s)", error)
        return path

    def texts(self, smiles: list[str]) -> list[str]:
        """What is tokenised of canonical `smiles`: them, or them without stereo."""
        return smiles if self.isomeric else [non_isomeric(s) for s in smiles]

    def facts(self) -> dict[str, int]:
        """`vocab_size`, and the ids of the special tokens the vocabulary has (`pad_id`,
        `unk_id`, `cls_id`, `sep_id`, `mask_id`)."""
        facts = {"vocab_size": self.tokenizer.get_vocab_size()}
        for token in SPECIAL_TOKENS:
            token_id = special_id(self.tokenizer, token)
            if token_id is not None:
                facts[f"{token.strip('[]').lower()}_id"] = token_id
        return facts

    def state_dict(self) -> dict:
        return {"tokenizer": self.tokenizer.to_str()}

    def load_state_dict(self, state: dict) -> None:
        self.tokenizer = Tokenizer.from_str(state["tokenizer"])

    def dataset(
        self, store: FeatureStore, mol_ids: np.ndarray, y: np.ndarray | None, name: str
    ) -> Dataset:
        return self.token_set(_smiles(store, mol_ids), y, name)

    def token_set(self, smiles: list[str], y: np.ndarray | None, name: str) -> TokenSet:
        """The token ids of canonical `smiles` (set `name` in the counts)."""
        encodings = self.tokenizer.encode_batch(self.texts(smiles))
        unk = special_id(self.tokenizer, UNK)
        self.imputed[name] = sum(e.ids.count(unk) for e in encodings) if unk is not None else 0
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
        if self.max_length is not None:
            self.truncated[name] = sum(len(i) > self.max_length for i in ids)
            ids = [i[: self.max_length] for i in ids]
        pad = special_id(self.tokenizer, PAD)
        return TokenSet(ids, y, 0 if pad is None else pad)


class TokenSet(BatchedDataset):
    """Token ids of molecules; a batch is padded to its longest molecule (`lengths` lets
    the sampler group molecules of similar length into a batch)."""

    def __init__(self, ids: list[np.ndarray], y: np.ndarray | None, pad_id: int) -> None:
        self.ids = [torch.from_numpy(i) for i in ids]
        self.lengths = np.array([len(i) for i in ids], dtype=np.int64)
        self.y = None if y is None else torch.as_tensor(y, dtype=torch.float32)
        self.pad_id = pad_id

    def __len__(self) -> int:
        return len(self.ids)

    def batch(self, indices: list[int]) -> TokenBatch:
        idx = torch.as_tensor(indices, dtype=torch.int64)
        longest = int(self.lengths[indices].max()) if len(indices) else 0
        input_ids = torch.full((len(indices), longest), self.pad_id, dtype=torch.int64)
        mask = torch.zeros((len(indices), longest), dtype=torch.int64)
        for row, i in enumerate(indices):
            n = len(self.ids[i])
            input_ids[row, :n] = self.ids[i]
            mask[row, :n] = 1
        y = None if self.y is None else self.y[idx]
        return TokenBatch(input_ids=input_ids, attention_mask=mask, y=y, index=idx)


def pretrained_tokenizer(source: str) -> Tokenizer:
    """The tokenizer of a `tokenizer.json` file, or of a pretrained model (a folder or a
    hub id): its `tokenizer.json`, else the fast tokenizer `transformers` builds from its
    files."""
    path = Path(source)
    if path.is_file():
        return Tokenizer.from_file(str(path))
    folder = resolve_pretrained(source)
    if (folder / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder)).backend_tokenizer


def special_id(tokenizer: Tokenizer, token: str) -> int | None:
    """The id of special token `token` ([PAD], [UNK], …) or of its RoBERTa counterpart."""
    for name in (token, ROBERTA_TOKENS[token]):
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return token_id
    return None


def non_isomeric(smiles: str) -> str:
    """The canonical SMILES of `smiles` without stereo and isotope marks."""
    from rdkit import Chem

    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot parse the cached SMILES {smiles!r}")
    return Chem.MolToSmiles(mol, isomericSmiles=False)


def _smiles(store: FeatureStore, mol_ids: np.ndarray) -> list[str]:
    return [bytes(m["smiles"]).decode() for m in store.iter_arrays(mol_ids)]
