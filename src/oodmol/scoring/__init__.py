"""Scoring predictions into a run's record and result files: the regression and uncertainty
metrics of train.py's test, of predictions made elsewhere, of the Python API."""
