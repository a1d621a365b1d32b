"""BOOM's invariant and equivariant 3D GNNs: pair weights and bonds, the block against BOOM's dense
form, symmetry, training steps, and their Hydra configs."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch
from fit_helpers import training_losses
from geometry_helpers import assert_invariant, permuted, point_cloud_batch, random_rotation
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from paths import REPO
from rdkit import Chem

from oodmol.data.batches import PointCloudBatch
from oodmol.data.features import GraphSet
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.models.backbones.egnn import EGNN, bond_push
from oodmol.models.backbones.ignn import (
    IGNN,
    DenseLayout,
    InvariantBlock,
    covalent_radii,
    pair_weights,
    perceive_bonds,
)
from oodmol.models.module import PropertyRegressor

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = REPO
# drug-like molecules and the elements BOOM's one-hot lacked (S, Cl, Br, I, P, B, Si)
BOND_SMILES = [
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "CN1C=NC2=C1C(=O)N(C(=O)N2C)C",
    "Clc1ccc(cc1)C(c1ccccc1)N1CCN(CC1)CCOCC(=O)O",
    "CS(=O)(=O)Nc1ccc(Br)cc1I",
    "FC(F)(F)c1ccc(OC2CCNCC2)cc1",
    "CCSSCC",
    "OP(=O)(O)OCC",
    "B(O)(O)c1ccccc1",
    "C[Si](C)(C)OC",
    "C/C=C/c1cc[nH+]cc1",
    "N#CC",
]


def test_pair_weights_are_distances_over_their_row_sum_plus_one():
    pos = torch.tensor([[0.0, 0, 0], [1, 0, 0], [3, 0, 0], [0, 0, 0], [0, 2, 0]])
    batch = torch.tensor([0, 0, 0, 1, 1])
    layout = DenseLayout.of(batch)
    (weight,) = pair_weights(layout.distances(pos))
    # one block of width 3, molecules by size: row 0 molecule 1, row 1 molecule 0
    assert layout.slot.tolist() == [3, 4, 5, 0, 1]
    torch.testing.assert_close(weight[1, 0], torch.tensor([0, 1 / 5, 3 / 5]))
    torch.testing.assert_close(weight[0], torch.tensor([[0, 2 / 3, 0], [2 / 3, 0, 0], [0, 0, 0]]))
    # with a cutoff of 2.5 Å atoms 0 and 2 no longer see each other
    (weight,) = pair_weights(layout.distances(pos), cutoff=2.5)
    torch.testing.assert_close(weight[1, 0], torch.tensor([0, 1 / 2, 0]))
    torch.testing.assert_close(weight[1, 2], torch.tensor([0, 2 / 3, 0]))


def test_molecules_are_grouped_by_size_into_blocks(monkeypatch):
    monkeypatch.setattr(DenseLayout, "GROUP", 2)
    batch = torch.tensor([0] * 4 + [1] * 1 + [2] * 3 + [3] * 2 + [4] * 5)
    layout = DenseLayout.of(batch)
    assert layout.molecules.tolist() == [1, 3, 2, 0, 4]
    assert layout.shapes == [(2, 2), (2, 4), (1, 5)]
    assert sorted(layout.slot.tolist()) == sorted(set(layout.slot.tolist()))  # no clashes
    values = torch.arange(len(batch), dtype=torch.float32)
    blocks = layout.dense(values)
    assert blocks[0].tolist() == [[4, 0], [8, 9]]
    assert blocks[1].tolist() == [[5, 6, 7, 0], [0, 1, 2, 3]]
    assert blocks[2].tolist() == [[10, 11, 12, 13, 14]]


@pytest.mark.parametrize("group", [1, 4, 8])
def test_perceived_bonds_are_the_molecules_bonds(group, monkeypatch):
    monkeypatch.setattr(DenseLayout, "GROUP", group)
    batch = point_cloud_batch(BOND_SMILES)
    layout = DenseLayout.of(batch.molecule)
    distances = layout.distances(batch.pos)
    bonds = perceive_bonds(batch.z, layout, distances, covalent_radii())
    expected, offset = set(), 0
    for smiles in BOND_SMILES:
        mol = Chem.AddHs(Chem.MolFromSmiles(smiles))  # the conformer's atom order
        for bond in mol.GetBonds():
            i, j = bond.GetBeginAtomIdx() + offset, bond.GetEndAtomIdx() + offset
            expected |= {(i, j), (j, i)}
        offset += mol.GetNumAtoms()
    assert set(map(tuple, bonds.t().tolist())) == expected


def test_bonds_stay_within_fragments_placed_on_top_of_each_other():
    """A salt's two ions, the second moved onto the first (as ETKDG did to mol_id 8065 of
    the 10k set): bonds perceived within fragments are the SMILES graph's, bonds
    perceived from the geometry alone would join the ions."""
    smiles = "[NH4+].CC(=O)[O-]"
    cloud = Graph3D(seed=0)(MolInput(smiles))
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))  # the conformer's atom order
    fragments = np.zeros(mol.GetNumAtoms(), dtype=np.int64)
    for index, atoms in enumerate(Chem.GetMolFrags(mol)):
        fragments[list(atoms)] = index
    assert (cloud["fragment"] == fragments).all()
    pos = cloud["pos"].copy()
    second = cloud["fragment"] == 1
    pos[second] += pos[~second].mean(0) - pos[second].mean(0)
    dataset = GraphSet(
        [{**cloud, "pos": pos}], [0.0], PointCloudBatch, ("z", "pos", "fragment"), ()
    )
    batch = dataset.__getitems__([0])[0]
    layout = DenseLayout.of(batch.molecule)
    distances = layout.distances(batch.pos)
    expected = set()
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        expected |= {(i, j), (j, i)}
    within = perceive_bonds(batch.z, layout, distances, covalent_radii(), fragment=batch.fragment)
    assert set(map(tuple, within.t().tolist())) == expected
    anywhere = perceive_bonds(batch.z, layout, distances, covalent_radii())
    assert set(map(tuple, anywhere.t().tolist())) > expected


@pytest.mark.parametrize("group", [1, 3, 8, 64])  # 64: the whole batch, as on a GPU
def test_block_matches_booms_dense_form(group, monkeypatch):
    """BOOM's InvariantBlock, molecule by molecule: D = cdist / (row sum + 1), then
    h ← LN(GCL(h) + h + LN_m(D · φ(h))) per sublayer (in float64), whatever the grouping
    of molecules into dense blocks."""
    monkeypatch.setattr(DenseLayout, "GROUP", group)
    torch.manual_seed(0)
    batch = point_cloud_batch()
    pos, segment = batch.pos.double(), batch.molecule
    layout = DenseLayout.of(segment)
    bonds = perceive_bonds(batch.z, layout, layout.distances(pos), covalent_radii())
    bond_features = torch.randn(bonds.shape[1], 3, dtype=torch.float64)
    bond_embedding = torch.nn.Linear(3, 8).double()
    block = InvariantBlock(hidden=8, sublayers=2).double().eval()
    h = torch.randn(len(pos), 8, dtype=torch.float64)
    with torch.no_grad():
        weights = pair_weights(layout.distances(pos))
        ours = block(h, bonds, bond_features, bond_embedding, weights, layout.slot)
        expected = h
        for gcl, norm in zip(block.gcls, block.norms, strict=True):
            projected = block.pair_sum.project(expected)
            dense = torch.zeros_like(expected)
            for molecule in segment.unique():
                atoms = segment == molecule
                d = torch.cdist(pos[atoms], pos[atoms])
                dense[atoms] = (d / (d.sum(-1, keepdim=True) + 1)) @ projected[atoms]
            update = gcl(expected, bonds, bond_features, bond_embedding) + expected
            expected = norm(update + block.pair_sum.norm(dense))
    torch.testing.assert_close(ours, expected)


def test_bond_push_moves_bonded_atoms_apart():
    pos = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [9.0, 0.0, 0.0]], dtype=torch.float64)
    bonds = torch.tensor([[0, 1], [1, 0]])  # atom 2 is bonded to nothing
    moved = bond_push(pos, bonds)
    step = 2.0 / ((2.0 + 1) * 4.0)  # |x_i − x_j| / ((r + 1) r²)
    expected = torch.tensor([[-step, 0, 0], [2 + step, 0, 0], [9, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(moved, expected)


@pytest.mark.parametrize("backbone", [IGNN, EGNN])
def test_outputs_are_invariant_to_rotation_reflection_translation_permutation(backbone):
    """Both read the geometry through distances only, so reflections are included."""
    torch.manual_seed(0)
    assert_invariant(backbone(hidden=16, layers=2), point_cloud_batch(), reflect=True)


def test_egnn_coordinates_are_equivariant():
    torch.manual_seed(0)
    model = EGNN(hidden=8, layers=2).double().eval()
    batch = replace(point_cloud_batch(), pos=point_cloud_batch().pos.double())
    with torch.no_grad():
        _, moved = model.encode(batch)
        assert (moved - batch.pos).norm(dim=-1).median() > 0.1  # the atoms moved
        rotation = random_rotation(0, reflect=True)
        shift = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
        _, moved_then = model.encode(replace(batch, pos=batch.pos @ rotation.T + shift))
        torch.testing.assert_close(moved_then, moved @ rotation.T + shift)
        shuffled, perm = permuted(batch, seed=0)
        torch.testing.assert_close(model.encode(shuffled)[1], moved[perm])


def test_cutoff_restricts_the_pair_sum():
    torch.manual_seed(0)
    batch = point_cloud_batch()
    wide, narrow = IGNN(hidden=8, layers=1), IGNN(hidden=8, layers=1, cutoff=2.0)
    narrow.load_state_dict(wide.state_dict())
    with torch.no_grad():
        assert not torch.allclose(wide(batch)[0], narrow(batch)[0])
        far = IGNN(hidden=8, layers=1, cutoff=1000.0)
        far.load_state_dict(wide.state_dict())
        torch.testing.assert_close(far(batch)[0], wide(batch)[0])


@pytest.mark.parametrize("backbone", [IGNN, EGNN])
def test_training_steps_lower_the_loss(backbone):
    torch.manual_seed(0)
    batch = point_cloud_batch()
    model = PropertyRegressor(
        backbone(hidden=16, layers=2),
        optimizer=partial(torch.optim.Adam, lr=1e-2),
        extensive=False,  # sums over 5 to 20 atoms fit these made-up targets slowly
    )
    losses = training_losses(model, batch, steps=25)
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    "name,backbone,epochs,layers,sublayers", [("ignn", IGNN, 50, 4, 1), ("egnn", EGNN, 100, 3, 2)]
)
def test_config_builds_the_model(name, backbone, epochs, layers, sublayers):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            "train", overrides=[f"model={name}", "task=qm9_homo", "model.module.backbone.hidden=8"]
        )
    assert cfg.model.name == name and cfg.model.max_epochs == epochs
    assert cfg.model.batch_size == 32 and cfg.model.featurizer._target_.endswith("Graph3D")
    module = instantiate(cfg.model.module)
    assert isinstance(module, PropertyRegressor) and type(module.backbone) is backbone
    assert len(module.backbone.blocks) == layers and module.backbone.cutoff is None
    assert len(module.backbone.blocks[0].gcls) == sublayers
    assert not module.readout.extensive  # HOMO is intensive: mean over atoms
    optimizer = module.optimizer_factory(module.parameters())
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["lr"] == 1e-3
    assert module.scheduler_factory(optimizer).gamma == 0.99
    batch = point_cloud_batch()
    assert module(batch).shape == (len(batch),)
