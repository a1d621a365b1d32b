"""BOOM's ablations turned from runs into its figures (`oodmol ablation ...`): supervised
pretraining (its Fig. 5) and OOD data augmentation (its Fig. 7); and beyond BOOM, the
geometry 3D models read (MMFF94 against GFN2-xTB)."""
