"""Train and test one model on one task: python train.py model=<m> task=<t> split=<s>
(the same as `oodmol train ...`)."""

from oodmol.apps.train import main

if __name__ == "__main__":
    main()
