"""Leaderboard over training runs: ``oodmol report <runs_dir> --out <dir>``."""
