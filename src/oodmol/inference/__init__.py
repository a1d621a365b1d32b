"""Using a trained model: the checkpoint read as data, new molecules predicted, a
checkpoint scored again."""
