"""Data kept on the device: the batches a set gathers there are the batches it builds on
the host. The meta device stands in for a GPU here: a set moved to it gathers batches of
the same shapes without reading a value back, so no tensor of a batch is left behind on
the host and no step waits for the device to answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from batch_sets import batch_tensors, small_sets

from oodmol.data.residency import DeviceResidency
from oodmol.data.tokens import TokenSet
from oodmol.errors import InputError

META = torch.device("meta")
BATCHES = [[3, 0, 2], [1], [4, 4, 1, 0], []]


@pytest.mark.parametrize("kind", list(small_sets()))
def test_a_set_moved_to_the_device_gathers_the_same_batches_there(kind: str) -> None:
    host = small_sets()[kind]
    on_cpu, on_meta = host.on_device(torch.device("cpu")), host.on_device(META)
    assert on_meta.nbytes() == host.nbytes() > 0
    for indices in BATCHES:
        expected = batch_tensors(host.batch(indices))
        same = batch_tensors(on_cpu.batch(indices))
        gathered = batch_tensors(on_meta.batch(indices))
        assert same.keys() == gathered.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(same[name], tensor), name
            assert gathered[name].device == META, name
            assert (gathered[name].shape, gathered[name].dtype) == (tensor.shape, tensor.dtype)


def test_moving_a_set_leaves_the_hosts_as_it_was() -> None:
    host = small_sets()["graphs"]
    before = batch_tensors(host.batch([2, 1]))
    host.on_device(META)
    after = batch_tensors(host.batch([2, 1]))
    assert all(torch.equal(before[k], after[k]) and after[k].device.type == "cpu" for k in before)


def test_each_set_is_moved_once_and_again_only_when_it_is_another_set() -> None:
    residency = DeviceResidency(True)
    train = small_sets()["graphs"]
    moved = residency.dataset("train", train, META)
    assert moved is not train and residency.dataset("train", train, META) is moved
    assert residency.holds(moved) and not residency.holds(train)
    assert residency.resident == ["train"]
    rebuilt = small_sets()["graphs"]  # the set made anew (a datamodule set up again)
    assert residency.dataset("train", rebuilt, META) is not moved


@pytest.mark.parametrize(
    "setting, device",
    [(True, torch.device("cpu")), ("auto", torch.device("cpu")), (False, META), ("auto", META)],
)
def test_the_data_stays_where_it_is_unless_a_gpu_has_room_or_it_is_asked_for(
    setting, device
) -> None:
    """On the CPU the data is already where the model is; `auto` moves data to CUDA
    devices only, within their free memory; `false` never."""
    residency = DeviceResidency(setting)
    train = small_sets()["vectors"]
    assert residency.dataset("train", train, device) is train
    assert residency.resident == []


def test_a_set_built_on_the_host_stays_there_and_says_so(caplog) -> None:
    tokens = TokenSet([np.array([1, 2]), np.array([3])], None, 0)
    residency = DeviceResidency(True)
    with caplog.at_level("INFO"):
        assert residency.dataset("val", tokens, META) is tokens
    assert "the val set stays on the host: TokenSet batches are built there" in caplog.text


@pytest.mark.parametrize("value", ["yes", 1, None, "True"])
def test_a_setting_other_than_auto_true_or_false_is_refused(value) -> None:
    with pytest.raises(InputError, match="data_on_device must be auto, true or false"):
        DeviceResidency(value)
