"""`python -m train_in_child <dir> <overrides...>`: the training app run three times by
`oodmol.training.child.run_train`, this process's environment and working folder changed
between the runs: `--cfg job` printing a setting read from the environment; the same
from <dir>, with the folder it ran in; then <overrides>, after a change to a variable
only an interpreter's start reads. Prints the exit statuses and the fork server of each
run."""

import os
import sys

from oodmol.training import child

if __name__ == "__main__":
    folder, *overrides = sys.argv[1:]
    shown = ["--cfg", "job", "--resolve", "task=lipophilicity", "+probe=${oc.env:PROBE}"]
    codes, servers = [], []

    def run(arguments: list[str]) -> None:
        codes.append(child.run_train(arguments))
        servers.append(child._server.process.pid)

    os.environ["PROBE"] = "first"
    run(shown)
    os.environ["PROBE"] = "second"
    os.chdir(folder)
    run([*shown, "+where=${hydra:runtime.cwd}"])
    os.environ["MALLOC_ARENA_MAX"] = "2"
    run(overrides)
    print("exit statuses:", *codes)
    print("same server as the first:", *(s == servers[0] for s in servers))
