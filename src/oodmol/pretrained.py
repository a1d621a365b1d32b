"""Where a pretrained Hugging Face model's files are, offline-safe.

`model.pretrained` names either a local folder (a `save_pretrained` output: it works
everywhere, with no network) or a hub id such as `seyonec/PubChem10M_SMILES_BPE_450k`. A
hub id is looked up first in `OODMOL_MODEL_DIR` (a folder of local copies, each at
`<OODMOL_MODEL_DIR>/<owner>/<name>`), then in the Hugging Face cache or on the hub; when
none has it, the error says where it was looked for and how to provide a copy.
"""

from __future__ import annotations

import os
from pathlib import Path

from oodmol.errors import UserError

MODEL_DIR_VARIABLE = "OODMOL_MODEL_DIR"


class PretrainedNotFoundError(UserError, FileNotFoundError):
    """A pretrained model that is neither a local folder, a local copy, nor on the hub."""


def resolve_pretrained(name: str | os.PathLike) -> Path:
    """The local folder holding the files of pretrained model `name`."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    text = str(name)
    if path.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1:
        raise PretrainedNotFoundError(f"model.pretrained={text}: no such folder")
    searched = []
    local_copies = os.environ.get(MODEL_DIR_VARIABLE)
    if local_copies:
        copy = Path(local_copies) / text
        if copy.is_dir():
            return copy
        searched.append(f"{MODEL_DIR_VARIABLE} ({copy})")
    else:
        searched.append(f"{MODEL_DIR_VARIABLE} (not set)")
    try:
        return _from_hub(text)
    except Exception as error:  # offline, unknown id, gated: every failure reads the same
        searched.append(f"the Hugging Face cache and hub ({type(error).__name__}: {error})")
    raise PretrainedNotFoundError(
        f"model.pretrained={text}: not a local folder, and not found in "
        + "; nor in ".join(searched)
        + f". Copy the model's files (e.g. `hf download {text} --local-dir "
        f"$OODMOL_MODEL_DIR/{text}` on a machine with network) or pass a local folder."
    )


def check_vocabulary(vocab_size: int, embeddings: int, pretrained: str) -> None:
    """Refuse a tokenizer of more tokens than the pretrained model has embeddings (ids
    past them would index no embedding)."""
    if vocab_size > embeddings:
        raise ValueError(
            f"the tokenizer has {vocab_size} tokens, more than the {embeddings} embeddings "
            f"of model.pretrained={pretrained}: pair it with its own tokenizer (model.tokenizer)"
        )


def _from_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, etag_timeout=10))
