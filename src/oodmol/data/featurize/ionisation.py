"""How much lower a molecule's log D at pH 7.4 lies than its log P, from rules of thumb
for the pKa of its ionisable groups.

log P is the partition of the neutral molecule between octanol and water; log D, what
lipophilicity data sets measure, partitions every form present at the pH. An acid or a
base mostly ionised at pH 7.4 (a carboxylic acid, an aliphatic amine) has a log D several
units below its log P. The shift here is

    log P − log D = −log10(f + (1 − f) · 10^ION_PAIR_DROP),

with f the neutral fraction from the strongest acidic and the strongest basic group
(Henderson–Hasselbalch, the two groups independent) and the ionised forms partitioning
ION_PAIR_DROP log units below the neutral one (as ion pairs into octanol; Avdeef's
"diff 3–4" rule), which caps the shift at 3.5.

The pKa come from typical values of the groups (Perrin, Dempsey & Serjeant, "pKa
prediction for organic acids and bases", 1981; Manallack, "The pKa distribution of
drugs", 2007): one value per acidic group, and for aliphatic amines the unsubstituted
amine's value lowered by each electron-withdrawing neighbour on the way out from the
nitrogen (benzylamine 9.3, morpholine's N-methyl 7.4, propranolol 9.5). They are rules,
not a pKa model: a group the tables do not name (phenols, imides, pyridines: pKa far
from 7.4, hence little shift) counts as neutral, and the second pKa of a polyamine and
substituents more than three bonds from an amine's nitrogen are left out.
"""

from __future__ import annotations

import math

from rdkit import Chem

PH = 7.4
ION_PAIR_DROP = -3.5  # log P of an ionised form below the neutral one's

# acids: (SMARTS whose first atom carries the acidic hydrogen, pKa); the lowest counts
_ACIDS = [
    ("[OX2H1,OX1-][CX3;!$(C-a)]=O", 4.8),  # aliphatic carboxylic acid (acetic 4.76)
    ("[OX2H1,OX1-][CX3;$(C-a)]=O", 4.2),  # aromatic carboxylic acid (benzoic 4.2)
    ("[#7H1,#7-]1:[#7]:[#7]:[#7]:[#6]:1", 4.9),  # tetrazole, either tautomer
    ("[#7H1,#7-]1:[#7]:[#7]:[#6]:[#7]:1", 4.9),
    ("[NX3H1,NX2-]([CX3]=O)[SX4](=O)=O", 4.5),  # acyl sulfonamide, sulfonylurea
    ("[OX2H1,OX1-][SX4](=O)=O", -1.0),  # sulfonic acid
    ("[OX2H1,OX1-][PX4]=O", 2.0),  # phosphonic and phosphoric acids
    ("[NX3H1,NX2-]([SX4](=O)=O)c:n", 6.5),  # N-heteroaryl sulfonamide (sulfadiazine 6.5)
    ("[NX3H1,NX2-]([SX4](=O)=O)c", 8.5),  # N-aryl sulfonamide
    ("[NX3H1,NX2-]1C(=O)S[CX4]C1=O", 6.5),  # thiazolidinedione (the glitazones)
]
# bases: (SMARTS whose first atom takes the proton, pKa of its conjugate acid)
_BASES = [
    # amidine or guanidine, neither acylated, sulfonylated nor in an aromatic ring
    (
        "[NX2;!a;!$(N-[#6]=[O,S]);!$(N-S);!$(N-O);!$(N-C#N);!$(N-a)]"
        "=[CX3;!a;!$(C-[#6]=O)][NX3;!a;!$(N-[#6]=[O,S]);!$(N-S)]",
        11.5,
    ),
    ("[nX2;r5;R1]1:c:[nX3;r5]:c:c:1", 7.0),  # imidazole not fused (benzimidazole 5.5)
    ("[nX2;R1]1:c:c:c(-[NX3;!$(N-[#6]=O);!$(N-S)]):c:c:1", 9.2),  # 4-aminopyridine
]
# an sp3 amine nitrogen whose neighbours are sp3 carbons or hydrogens (neutral or
# protonated): its pKa comes from `_amine_pka`
_AMINE = Chem.MolFromSmarts("[NX3,NX4+;!$(N~[!#6;!#1]);!$(N-[#6;!X4])]")
_AMINE_PKA = {1: 10.6, 2: 10.7, 3: 9.8}  # methylamine, dimethylamine, trimethylamine
# lowering of an amine's pKa by one neighbour of an α carbon (the β atom)
_BETA_DROP = {"aromatic": 1.3, "carbonyl": 2.7, "nitrile": 5.0, "sp2": 1.0, "sp": 2.4}
# lowering by one heteroatom bonded to a β carbon (the γ atom): 2-methoxyethylamine 9.4,
# 2,2,2-trifluoroethylamine 5.7 (three fluorines), piperazine 9.7 (two paths)
_GAMMA_DROP = {7: 0.7, 8: 1.2, 9: 1.6, 16: 0.8, 17: 1.2}
_HETERO_ON_ALPHA_DROP = 2.5  # an aminal or hemiaminal ether carbon


def _compiled(table):
    return [(Chem.MolFromSmarts(smarts), pka) for smarts, pka in table]


_ACID_PATTERNS = _compiled(_ACIDS)
_BASE_PATTERNS = _compiled(_BASES)


def _beta_kind(atom: Chem.Atom) -> str | None:
    if atom.GetIsAromatic():
        return "aromatic"
    for bond in atom.GetBonds():
        other = bond.GetOtherAtom(atom).GetAtomicNum()
        if bond.GetBondType() == Chem.BondType.DOUBLE and other in (7, 8, 16):
            return "carbonyl"
        if bond.GetBondType() == Chem.BondType.TRIPLE:
            return "nitrile" if other == 7 else "sp"
    if atom.GetHybridization() == Chem.HybridizationType.SP2:
        return "sp2"
    return None


def _amine_pka(mol: Chem.Mol, index: int) -> float:
    nitrogen = mol.GetAtomWithIdx(index)
    if nitrogen.GetFormalCharge() > 0 and nitrogen.GetTotalNumHs() == 0:
        return math.inf  # a quaternary ammonium: charged at every pH
    carbons = sum(1 for a in nitrogen.GetNeighbors() if a.GetAtomicNum() == 6)
    if carbons == 0:
        return 9.25  # ammonia
    pka = _AMINE_PKA[min(carbons, 3)]
    for alpha in nitrogen.GetNeighbors():
        for beta in alpha.GetNeighbors():
            if beta.GetIdx() == index:
                continue
            if beta.GetAtomicNum() != 6:
                pka -= _HETERO_ON_ALPHA_DROP if beta.GetAtomicNum() in (7, 8, 16) else 0.0
                continue
            kind = _beta_kind(beta)
            if kind is not None:
                pka -= _BETA_DROP[kind]
                continue
            for gamma in beta.GetNeighbors():
                if gamma.GetIdx() != alpha.GetIdx():
                    pka -= _GAMMA_DROP.get(gamma.GetAtomicNum(), 0.0)
    return pka


def acid_pkas(mol: Chem.Mol) -> list[float]:
    """The pKa of every acidic group the rules name, one per matching atom."""
    found: dict[int, float] = {}
    for pattern, pka in _ACID_PATTERNS:
        for match in mol.GetSubstructMatches(pattern):
            found.setdefault(match[0], pka)
    return sorted(found.values())


def base_pkas(mol: Chem.Mol) -> list[float]:
    """The conjugate acids' pKa of every basic group the rules name, one per basic atom."""
    found: dict[int, float] = {}
    for pattern, pka in _BASE_PATTERNS:
        for match in mol.GetSubstructMatches(pattern):
            found.setdefault(match[0], pka)
    for (index,) in mol.GetSubstructMatches(_AMINE):
        found.setdefault(index, _amine_pka(mol, index))
    return sorted(found.values())


def log_d_shift(mol: Chem.Mol, ph: float = PH) -> float:
    """log P − log D at `ph` (≥ 0, at most −ION_PAIR_DROP); 0 for a neutral molecule."""
    acids, bases = acid_pkas(mol), base_pkas(mol)
    acid_ionised = 10 ** (ph - acids[0]) if acids else 0.0
    base_ionised = 10 ** (bases[-1] - ph) if bases else 0.0
    neutral = 1.0 / ((1.0 + acid_ionised) * (1.0 + base_ionised))
    return max(0.0, -math.log10(neutral + (1.0 - neutral) * 10**ION_PAIR_DROP))
