"""The project's benchmarks, run from the repository root as modules:
`python -m bench.<name> --help` (e.g. `python -m bench.models_throughput`).
`bench.harness` holds what they share."""
