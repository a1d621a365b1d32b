"""oodmol pretrain: self-supervised pretraining of a SMILES encoder (masked-language
modelling for ChemBERTa, ModernBERT and MoLFormer, XLNet's permutation LM for the
Regression Transformer), whose output folder fine-tuning starts from:

    oodmol pretrain model=modernbert corpus=[qm9_homo,csd10k_density] out=pretrained/mb
    oodmol pretrain model=chemberta corpus=molecules.smi out=pretrained/cb max_epochs=3
    python train.py model=modernbert task=csd10k_density model.pretrained=pretrained/mb

`corpus`: a SMILES file (one per line, or a CSV with a `smiles` column) or task names
(their training and validation molecules under `split`). Every ID and OOD test molecule
of the corpus's tasks and of `exclude` (by default every task of experiment=boom) is
removed, compared by structure (canonical SMILES without stereo). The tokenizer is the
one fine-tuning would build (the model's; atom-level from the corpus where the model has
none), 5 % of the corpus (`holdout`) measures the validation loss, and `out/` gets the
model (`save_pretrained` layout), `tokenizer.json`, `pretrain_summary.json` and
`checkpoints/last.ckpt` (`resume=true` goes on from it). Settings: configs/pretrain.yaml.
Exit status: 0 done, 2 a usage or settings error.
"""

from __future__ import annotations

from oodmol.apps.preflight import check_gpu
from oodmol.apps.pretrain import run
from oodmol.cli.entry import entry_point
from oodmol.errors import UsageError
from oodmol.overrides import tool_config


@entry_point("oodmol pretrain", usage=__doc__)
def main(argv: list[str]) -> int:
    cfg = tool_config("pretrain", argv, required=("corpus", "out"))
    check_gpu(cfg)
    if cfg.model.get("pretraining") is None:
        raise UsageError(
            f"model={cfg.model.name} has no pretraining objective (model.pretraining); "
            "the SMILES transformers have one"
        )
    run(cfg)
    return 0
