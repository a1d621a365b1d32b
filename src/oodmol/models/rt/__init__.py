"""The Regression Transformer: `regression_transformer` (model=rt, property prediction as
filling in digits) and `pretraining` (its permutation language model, `oodmol pretrain
model=rt`). Its XLNet with numeric encodings is a backbone like the others
(`oodmol.models.backbones.rt`); its tokens are the data's (`oodmol.data.rt_tokens`)."""
