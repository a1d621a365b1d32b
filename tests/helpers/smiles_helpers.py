"""Tiny pretrained SMILES transformers for the tests, saved as `save_pretrained` writes
them: a RoBERTa (ChemBERTa's layout: config, weights, a byte-level BPE tokenizer as
vocab.json + merges.txt), a ModernBERT and a MoLFormer with the atom-level tokenizer, a
Regression Transformer with its SELFIES tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

SMILES = ["CCO", "c1ccccc1O", "CC(=O)O", "CCN", "ClCCBr", "C[NH3+]", "CC%10CCCCCCCCC%10"]
TINY = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)


def save_tiny_roberta(folder: Path, tokenizer_json: bool = False) -> Path:
    """A randomly initialised 2-layer RoBERTa for masked-language modelling and its BPE
    tokenizer (trained on `SMILES`); without `tokenizer_json` the folder, like the hub's
    ChemBERTa, has only vocab.json and merges.txt for `transformers` to read."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        SMILES * 5, vocab_size=270, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    folder.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(folder))  # vocab.json, merges.txt
    tokenizer = RobertaTokenizerFast.from_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    if not tokenizer_json:
        (folder / "tokenizer.json").unlink(missing_ok=True)
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=len(tokenizer), pad_token_id=1, max_position_embeddings=130, **TINY
    )
    RobertaForMaskedLM(config).save_pretrained(str(folder))
    return folder


def save_tiny_modernbert(folder: Path) -> Path:
    """A randomly initialised 2-layer ModernBERT and the atom-level tokenizer of `SMILES`
    (as tokenizer.json)."""
    from transformers import ModernBertConfig, ModernBertModel

    from oodmol.data.tokens import atom_level_tokenizer

    tokenizer = atom_level_tokenizer(SMILES)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    config = ModernBertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        pad_token_id=0,
        cls_token_id=2,
        sep_token_id=3,
        bos_token_id=2,
        eos_token_id=3,
        **TINY,
    )
    ModernBertModel(config).save_pretrained(str(folder))
    return folder


def save_tiny_molformer(folder: Path) -> Path:
    """A randomly initialised 2-layer MoLFormer in the hub's layout (config.json,
    model.safetensors) and the atom-level tokenizer of `SMILES` (as tokenizer.json)."""
    from oodmol.data.tokens import atom_level_tokenizer
    from oodmol.models.backbones.molformer import MoLFormer

    tokenizer = atom_level_tokenizer(SMILES)
    torch.manual_seed(0)
    sizes = dict(layers=2, heads=2, hidden=16, intermediate=16, features=8)
    MoLFormer(tokenizer.get_vocab_size(), pad_id=0, **sizes).save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def save_tiny_rt(folder: Path) -> Path:
    """A randomly initialised 2-layer Regression Transformer (XLNet LM, d_model 16) and
    the RT tokenizer of `SMILES` (as tokenizer.json)."""
    from oodmol.data.rt_tokens import rt_tokenizer, to_selfies
    from oodmol.models.backbones.rt import RTLanguageModel

    tokenizer = rt_tokenizer([to_selfies(s) for s in SMILES])
    torch.manual_seed(0)
    sizes = dict(layers=2, heads=2, hidden=16, intermediate=32)
    RTLanguageModel(tokenizer.get_vocab_size(), pad_id=0, **sizes).save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder
