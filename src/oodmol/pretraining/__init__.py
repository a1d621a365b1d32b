"""Self-supervised pretraining of the SMILES encoders (`oodmol pretrain`).

A model takes part through its YAML alone, under `model.pretraining`:
- `objective`: the class `oodmol pretrain` trains, built with the backbone's own settings
  (`model.module.backbone`, the tokenizer's facts filled in), so its encoder is the one
  fine-tuning builds. Called with a corrupted batch's tensors it returns the loss;
  `save_pretrained(folder)` writes what `model.pretrained=<folder>` loads
  (`objective.PretrainingObjective`).
- `corruption`: built with `tokenizer=` (the run's) and `probability=` (`mask_probability`),
  and called with (input_ids, attention_mask, generator), it returns the objective's
  keyword tensors: BERT's masking (`masking.BertMasking`) for the masked-LM models; a
  permutation-LM model brings its own (perm_mask, target_mapping, labels).
The core never asks which model it is.
"""
