"""oodmol as a benchmark library: load a task's sets, score any model's predictions on
them exactly as train.py's runs are scored, or fit a scikit-learn model in one call.

    from oodmol import benchmark

    benchmark.tasks()                                   # BOOM's 11 tasks
    b = benchmark.load("csd10k_density", split="ood", seed=0)
    b.train, b.val, b.test["id"], b.test["ood"]         # mol_id, smiles, target
    metrics = b.evaluate({"id": y_id, "ood": y_ood}, name="my_model", save_to="runs")
    benchmark.run(my_sklearn_regressor, "qm9_gap", features="descriptors", seeds=(0, 1, 2))
"""

from oodmol.benchmark.benchmark_task import BenchmarkTask, load, tasks
from oodmol.benchmark.evaluation import PredictionError, evaluate
from oodmol.benchmark.runner import run

__all__ = ["BenchmarkTask", "PredictionError", "evaluate", "load", "run", "tasks"]
