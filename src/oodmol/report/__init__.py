"""Leaderboard over training runs: ``python -m oodmol.report <runs_dir> --out <dir>``."""
