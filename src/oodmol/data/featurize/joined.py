"""Representations side by side: vectors joined into one (`Joined`: e.g. RDKit's
descriptors beside the physics estimates, `model/representation=descriptors_physics`), or
a graph with molecule-level vectors beside it (`GraphWithVectors`: Chemprop's extra
descriptors, read by the D-MPNN after aggregation), so that a model reads what each says
of the molecule.

Each part is cached as a run of that part alone caches it (a joined representation costs
nothing its parts have not cost), and the feature cache reads them as one
(`oodmol.data.store.JoinedStore`): a molecule's vector is the parts' vectors in the
order the config names them (`x`; beside a graph, `x_d`), and a molecule any part
refused is left out with that part's reason.
"""

from __future__ import annotations

import numpy as np

from oodmol.data.featurize.base import Featurizer, MolInput


class Joined(Featurizer):
    """The parts, named as the config names them (`Joined(descriptors=..., physics=...)`)."""

    def __init__(self, **parts: Featurizer) -> None:
        if len(parts) < 2:
            raise ValueError(f"a joined representation needs two parts or more, not {len(parts)}")
        self.parts = dict(parts)
        self.name = "+".join(part.name for part in self.parts.values())

    def joins(self) -> list[Featurizer]:
        return list(self.parts.values())

    @property
    def columns(self) -> tuple[str, ...]:
        """The names of the joined vector's entries, where every part names its own (as
        the physics estimates and RDKit's descriptors do); else none."""
        named = [getattr(part, "columns", None) for part in self.parts.values()]
        if any(names is None for names in named):
            return ()
        columns = tuple(name for names in named for name in names)
        if len(set(columns)) < len(columns):
            return ()  # a name two parts share would not say which part it means
        return columns

    def params(self) -> dict:
        return {name: part.params() for name, part in self.parts.items()}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        raise TypeError(f"{self.name}: a joined representation is read from its parts' caches")


class GraphWithVectors(Joined):
    """A graph (the first part) and the other parts' vectors joined beside it as `x_d`
    (`GraphWithVectors(graph=graph2d, descriptors=..., physics=...)`)."""

    beside_graph = True
