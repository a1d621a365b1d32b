"""Self-supervised pretraining of the SMILES encoders (`oodmol pretrain`).

A model takes part through its YAML alone: `model.pretraining.objective` names the
module that `oodmol pretrain` trains (built with the backbone's own settings, so the
encoder is the one fine-tuning builds) and `model.pretraining.corruption` the way a
batch is corrupted into its inputs and labels. The objective returns the loss of a
corrupted batch and writes a folder that `model.pretrained=<folder>` loads; the core
never asks which model it is.
"""
