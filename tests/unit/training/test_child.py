"""The training runs that campaigns, the transfer study and reproduction start, forked
from a server that imported the app once (`oodmol.training.child`): each child takes the
environment and working folder of its parent as they are when it starts (a new server
where what only an interpreter's start reads has changed), and ends as `python -m
oodmol.apps.train` in a fresh interpreter does, output and exit status."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from door_helpers import real_process, shared_doors
from paths import REPO

pytestmark = pytest.mark.slow  # starts the fork server, a fresh interpreter


def test_a_child_sees_its_parent_as_it_is_and_ends_as_a_fresh_interpreter(tmp_path: Path):
    refused = ["model=mlp", "nonsense=1"]
    helpers = [str(REPO / "tests" / "helpers"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, helpers))}
    done = shared_doors().run(["-m", "train_in_child", str(tmp_path), *refused], env=env)
    assert done.returncode == 0, done.shown()
    lines = done.stdout.splitlines()
    assert "probe: first" in lines and "probe: second" in lines, done.stdout
    assert f"where: {tmp_path}" in lines, done.stdout
    assert "exit statuses: 0 0 2" in lines, done.stdout
    # a new server where a variable that only a start reads has changed
    assert lines[-1] == "same server as the first: True True False", done.stdout
    fresh = real_process(["-m", "oodmol.apps.train", *refused], env=env)
    assert fresh.returncode == 2
    assert done.stderr == fresh.stderr and "there is no setting 'nonsense'" in fresh.stderr


@pytest.mark.parametrize("ignored", [[], ["SIGINT"], ["SIGINT", "SIGHUP"]])
def test_a_child_ignores_what_its_parent_ignores_as_a_fresh_interpreter_would(ignored):
    """A shell's background job ignores SIGINT; a fresh interpreter under it keeps that,
    and otherwise turns SIGINT into KeyboardInterrupt: the forked child's signals too."""
    from oodmol.apps.fork_server import take_signals
    from oodmol.training.child import INHERITED_SIGNALS, ignored_signals

    numbers = [getattr(signal, s) for s in INHERITED_SIGNALS]
    saved = [signal.getsignal(n) for n in numbers]
    try:
        for name in INHERITED_SIGNALS:
            handler = signal.SIG_IGN if name in ignored else signal.SIG_DFL
            signal.signal(getattr(signal, name), handler)
        assert ignored_signals() == ignored  # what the parent sends
        take_signals(ignored)  # what the child does with it
        for name in INHERITED_SIGNALS:
            expected = signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL
            expected = signal.SIG_IGN if name in ignored else expected
            assert signal.getsignal(getattr(signal, name)) == expected, name
    finally:
        for number, handler in zip(numbers, saved, strict=True):
            signal.signal(number, handler)
