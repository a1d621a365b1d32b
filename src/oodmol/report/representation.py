"""Which molecular representation each model learns from, for the tables and tests that
group models by it (BOOM Table 1, Table 8, Section 4.7).

One mapping, here, rather than a `representation:` key in every model's YAML: the
grouping is a reporting choice (BOOM's), it must also cover runs that have no YAML of
ours (external predictions, models of older checkouts), and it changes no run's result
or metrics.json. A model not listed is "unknown": shown in the tables, left out of the
group averages and tests, and named there.

BOOM's Table 7 labels the Random Forest and the MLP "SMILES"; both learn from RDKit
descriptors, so here they form a group of their own.
"""

from __future__ import annotations

GROUPS: dict[str, tuple[str, ...]] = {
    "3D": (
        "ignn",
        "egnn",
        "schnet",
        "dimenetpp",
        "visnet",
        "painn",
        "painn_dipole",
        "et",
        "et_dipole",
        "gotennet",
        "mace",
        "graphormer3d",
        "geoformer",
    ),
    "graph": ("chemprop", "tgnn"),
    "SMILES": ("chemberta", "modernbert", "molformer", "rt", "rt_regression"),
    "descriptors": ("rf", "mlp"),
}
UNKNOWN = "unknown"
# the order of rows and of the one-sided tests' pairs (earlier: expected better OOD)
ORDER = tuple(GROUPS)
_BY_MODEL = {model: group for group, models in GROUPS.items() for model in models}


def representation(model_name: str) -> str:
    """The group of a model by its own name (`model_name` in the runs table)."""
    return _BY_MODEL.get(model_name, UNKNOWN)
