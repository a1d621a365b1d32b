"""Training throughput of the SMILES transformers with BOOM's fixed padding against
dynamic padding, with and without length-grouped batches, on the same molecules.

    OMP_NUM_THREADS=1 python -m bench.tokens_throughput [--models chemberta,modernbert,molformer]
        [--batches 3] [--threads 1] [--seed 0] [override ...]

Each model is built as train.py builds it (`task=csd10k_density split=ood`, BOOM's sizes:
ChemBERTa 6 × 768, ModernBERT 8 × 768, MoLFormer 12 × 768) from the project's token
features. The molecules are `--batches` batches (of the model's batch size) drawn at
random from the training loader's own length-grouped epoch order (`EpochShuffle` with
the molecules' lengths, as `MoleculeDataModule` samples token sets), and every mode trains
on exactly those molecules, one timed optimizer step per batch after one untimed warm-up
step (trailing config overrides, e.g. model.module.backbone.layers=1, change the model
for a quick check):

- fixed: BOOM's batches, every molecule padded to 128 (ChemBERTa) or 256 (ModernBERT)
  tokens; MoLFormer's to its 202-token maximum (IBM's fine-tuning pads each batch to its
  longest molecule, so BOOM's MoLFormer batches are `dynamic`);
- dynamic: the same molecules in random batches, each padded to its longest molecule;
- grouped: the length-grouped batches, each padded to its longest molecule (what
  train.py does).

Prints per model and mode the training molecules per second, the mean padded width, and
the speed-up of `grouped` (and `dynamic`) over `fixed`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from oodmol.data.batches import TokenBatch
from oodmol.data.sampling import EpochShuffle

BOOM_PADDING = {"chemberta": 128, "modernbert": 256, "molformer": 202}


def padded_to(batch: TokenBatch, width: int, pad_id: int) -> TokenBatch:
    """`batch` padded on the right to `width` tokens (BOOM's padding="max_length")."""
    extra = width - batch.input_ids.shape[1]
    ids = torch.nn.functional.pad(batch.input_ids, (0, extra), value=pad_id)
    mask = torch.nn.functional.pad(batch.attention_mask, (0, extra), value=0)
    return TokenBatch(input_ids=ids, attention_mask=mask, y=batch.y, index=batch.index)


def measure(name: str, n_batches: int, seed: int, overrides: list[str]) -> list[dict]:
    from oodmol.config import compose_config
    from oodmol.training.build import build_datamodule, build_model, training_statistics

    cfg = compose_config(
        "train",
        [f"model={name}", "task=csd10k_density", "split=ood", "progress=false", *overrides],
    )
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    dataset, size = dm.datasets["train"], cfg.model.batch_size
    order = list(EpochShuffle(dataset, seed, lengths=dataset.lengths, batch_size=size))
    full = [order[k : k + size] for k in range(0, len(order) - size + 1, size)]
    rng = np.random.default_rng(seed)
    grouped = [full[k] for k in rng.choice(len(full), n_batches + 1, replace=False)]
    molecules = rng.permutation(np.concatenate(grouped)).tolist()
    shuffled = [molecules[k : k + size] for k in range(0, len(molecules), size)]

    def batches(indices: list[list[int]], width: int | None = None) -> list[TokenBatch]:
        made = [dm.features.collate(dataset.__getitems__(i)) for i in indices]
        return made if width is None else [padded_to(b, width, dataset.pad_id) for b in made]

    modes = {
        "fixed": batches(grouped, BOOM_PADDING[name]),
        "dynamic": batches(shuffled),
        "grouped": batches(grouped),
    }
    statistics = training_statistics(cfg, dm)
    rows = []
    for mode, mode_batches in modes.items():
        torch.manual_seed(seed)
        model = build_model(cfg, statistics)
        model.fit_target_scaling(dm.train_targets)
        model.train()
        optimizer = model.optimizer_factory(model.parameters())

        def step(batch: TokenBatch, model=model, optimizer=optimizer) -> None:
            optimizer.zero_grad(set_to_none=True)
            target = (batch.y - model.y_mean) / model.y_std
            model.likelihood.loss(model(batch), target).backward()
            optimizer.step()

        step(mode_batches[0])  # warm-up
        started = time.perf_counter()
        for batch in mode_batches[1:]:
            step(batch)
        seconds = time.perf_counter() - started
        timed = mode_batches[1:]
        rows.append(
            {
                "model": name,
                "mode": mode,
                "mol_s": sum(len(b) for b in timed) / seconds,
                "width": float(np.mean([b.input_ids.shape[1] for b in timed])),
                "real_tokens": float(np.mean([b.attention_mask.float().mean() for b in timed])),
            }
        )
        print(_line(rows[-1]), flush=True)
    return rows


def _line(row: dict) -> str:
    return (
        f"{row['model']:>10} {row['mode']:>8}: {row['mol_s']:7.2f} mol/s, padded width "
        f"{row['width']:5.1f}, {100 * row['real_tokens']:5.1f} % real tokens"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="chemberta,modernbert")
    parser.add_argument("--batches", type=int, default=3, help="timed batches per mode")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="train.py config overrides")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.models.split(","):
        rows = {row["mode"]: row for row in measure(name, args.batches, args.seed, args.overrides)}
        fixed = rows["fixed"]["mol_s"]
        print(
            f"{name}: grouped / fixed = {rows['grouped']['mol_s'] / fixed:.2f}x, "
            f"dynamic / fixed = {rows['dynamic']['mol_s'] / fixed:.2f}x "
            f"({args.batches} batches per mode, {args.threads} thread(s))",
            flush=True,
        )


if __name__ == "__main__":
    main()
