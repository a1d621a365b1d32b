"""Regression metrics of a run's predictions (RMSE, MAE, R², Spearman, BOOM's binned R²) and its
parity plot."""
