"""The Regression Transformer's input: a property block, then the molecule as SELFIES.

Every molecule reads `[CLS] <prop> n n n n n | [C][=C]… [SEP]`, where the five `n` are
the (normalised) property value written with the RT's number tokens: `_d_p_` is the
digit d at decimal place p (`_7_-1_` is 0.7) and `_._` the decimal point, so 0.717 is
`_0_0_ _._ _7_-1_ _1_-2_ _7_-3_` (BOOM: `'%0.3f' % value`, one integer digit). The
dataset always fills the block with [MASK]: the model writes the training value into
it (it owns the normalisation) and predicts it everywhere else, so a test molecule's
label never reaches its input.

The vocabulary's head is fixed (special tokens, `<prop>`, `|`, the number tokens: the
same ids in every run, which the numeric encodings of `oodmol.models.backbones.rt` rely
on), then the SELFIES tokens of the training molecules by decreasing count; an unseen
token of a test molecule is [UNK], counted like TokenFeatures counts it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from tokenizers import Regex, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Split

from oodmol.data.tokens import CLS, MASK, PAD, SEP, SPECIAL_TOKENS, UNK, TokenFeatures, TokenSet
from oodmol.pretrained import resolve_pretrained

PROPERTY = "<prop>"
SEPARATOR = "|"
DECIMALS = 3  # BOOM's '%0.3f'
POINT = "_._"
# the number block's tokens in order: the integer digit, the point, then the decimals
NUMBER_PLACES = (0, None, *range(-1, -DECIMALS - 1, -1))
NUMBER_TOKENS = (
    *(f"_{d}_0_" for d in range(10)),
    POINT,
    *(f"_{d}_{p}_" for p in range(-1, -DECIMALS - 1, -1) for d in range(10)),
)
FIXED_TOKENS = (*SPECIAL_TOKENS, PROPERTY, SEPARATOR, *NUMBER_TOKENS)
BLOCK = slice(2, 2 + len(NUMBER_PLACES))  # the number block's positions: after [CLS] <prop>
SELFIES_PATTERN = r"\[[^\]]+]|\."


def number_tokens(value: float) -> list[str]:
    """The number block of `value` (0 <= value < 10, rounded to DECIMALS places)."""
    text = f"{value:.{DECIMALS}f}"
    if not 0 <= float(text) < 10:
        raise ValueError(f"{value} is outside the number block's range [0, 10)")
    integer, decimals = text.split(".")
    return [f"_{integer}_0_", POINT, *(f"_{d}_{-p}_" for p, d in enumerate(decimals, 1))]


def rt_tokenizer(selfies: list[str]) -> Tokenizer:
    """A word-level tokenizer: the fixed head, then the SELFIES tokens of `selfies` by
    decreasing count (ties alphabetical)."""
    splitter = Split(Regex(SELFIES_PATTERN), behavior="isolated")
    counts = Counter(token for s in selfies for token, _ in splitter.pre_tokenize_str(s))
    ordered = sorted(counts, key=lambda token: (-counts[token], token))
    vocabulary = {token: i for i, token in enumerate([*FIXED_TOKENS, *ordered])}
    tokenizer = Tokenizer(WordLevel(vocabulary, unk_token=UNK))
    tokenizer.pre_tokenizer = splitter
    return tokenizer


def to_selfies(smiles: str) -> str:
    """The SELFIES of a SMILES; `strict=False` also encodes molecules beyond SELFIES'
    default valences (hypervalent atoms of the crystal sets), which would otherwise fail."""
    import selfies

    return selfies.encoder(smiles, strict=False)


class RTFeatures(TokenFeatures):
    """The RT's sequences of the cached SMILES (`tokenizer`: a saved RT `tokenizer.json`
    or a folder holding one; None builds it from the training molecules). `max_length`
    truncates longer sequences (the last token kept is then not [SEP]; counted per set)."""

    def fit_smiles(self, smiles: list[str]) -> None:
        """The saved tokenizer, or the one of the training molecules' `smiles` (also
        what `oodmol pretrain model=rt` builds from its corpus)."""
        if self.source is None:
            self.tokenizer = rt_tokenizer(self.texts(smiles))
        else:
            self.tokenizer = _saved_tokenizer(self.source)

    def texts(self, smiles: list[str]) -> list[str]:
        """The SELFIES of canonical `smiles` (without stereo with `isomeric=False`)."""
        return [to_selfies(s) for s in super().texts(smiles)]

    def token_set(self, smiles: list[str], y: np.ndarray | None, name: str) -> TokenSet:
        encodings = self.tokenizer.encode_batch(self.texts(smiles))
        vocab = self.tokenizer.get_vocab()
        unk = vocab[UNK]
        self.imputed[name] = sum(e.ids.count(unk) for e in encodings)
        head = [vocab[t] for t in (CLS, PROPERTY, *[MASK] * len(NUMBER_PLACES), SEPARATOR)]
        ids = [np.asarray([*head, *e.ids, vocab[SEP]], dtype=np.int64) for e in encodings]
        if self.max_length is not None:
            self.truncated[name] = sum(len(i) > self.max_length for i in ids)
            ids = [i[: self.max_length] for i in ids]
        return TokenSet(ids, y, vocab[PAD])


def _saved_tokenizer(source: str) -> Tokenizer:
    """An RT tokenizer saved as `tokenizer.json` (the file, or a folder holding it),
    checked to have the fixed head the numeric encodings rely on."""
    path = Path(source)
    file = path if path.is_file() else resolve_pretrained(source) / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(file))
    head = [tokenizer.id_to_token(i) for i in range(len(FIXED_TOKENS))]
    if head != list(FIXED_TOKENS):
        raise ValueError(f"{file} is not a Regression Transformer tokenizer (its first tokens)")
    return tokenizer
