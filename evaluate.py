"""Score a checkpoint or an external predictions CSV: python evaluate.py ckpt_path=<ckpt>,
or task=<t> split=<s> predictions=<csv> (the same as `oodmol evaluate ...`)."""

from oodmol.apps.evaluate import main

if __name__ == "__main__":
    main()
