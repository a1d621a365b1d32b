"""Building blocks shared by the 3D models, one job per module (after TorchMD-Net's
`torchmdnet/models/utils.py`):

- `cutoffs`: envelopes f(r) that vanish at the cutoff (cosine, polynomial);
- `radial`: radial bases (Gaussian, exponential-normal, Bessel);
- `distance`: the neighbour graph of a batch and its edge vectors, lengths, directions;
- `embedding`: TorchMD-Net's neighbour embedding;
- `equivariant`: the gated equivariant block and a vector norm safe at zero;
- `init`: Xavier-uniform initialisation of a model's Linear layers.

What the models' outputs share (scalar and dipole readouts) is in
`oodmol.models.output_modules`, with the base classes of the backbones that use them.
"""

from oodmol.models.blocks.cutoffs import CosineCutoff, PolynomialCutoff
from oodmol.models.blocks.distance import Distance, Edges
from oodmol.models.blocks.embedding import NeighborEmbedding
from oodmol.models.blocks.equivariant import GatedEquivariantBlock, vector_norm
from oodmol.models.blocks.init import xavier_init_linears
from oodmol.models.blocks.radial import BesselBasis, ExpNormalBasis, GaussianBasis

__all__ = [
    "BesselBasis",
    "CosineCutoff",
    "Distance",
    "Edges",
    "ExpNormalBasis",
    "GatedEquivariantBlock",
    "GaussianBasis",
    "NeighborEmbedding",
    "PolynomialCutoff",
    "vector_norm",
    "xavier_init_linears",
]
