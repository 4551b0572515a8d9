"""No host synchronisation in a training step of the model (GPU step overhead).

On a GPU, reading a device value on the host (``.item()``, ``int(t)``, ``bool(t)``, ``nonzero``,
a Python branch on a tensor) makes the host wait for every queued kernel, so the next step's
launches cannot overlap this step's work. On the ``meta`` device every such read raises, and
every other op runs on shapes alone: a forward and backward of each encoding on ``meta`` is the
CPU-side check that its GPU step never waits. (Reads that happen once per shape and are cached
count too, since the cache is cold here.) The training loop's own reads (a NaN check every 16
steps) are checked on a GPU in tests/integration/test_cuda.py."""

from __future__ import annotations

import pytest
import torch

from synthlab.model import COMPONENTS, build_model

PE = list(COMPONENTS) + [
    "kerple:kind=power",
    "kerple+dape:k=3",
    "cope+rope",
    "fire+dape:k=5",
    "alibi+t5",
    "t5+dape:k=3",
    "cope+dape:k=3",
    "bipe-rope+dape:k=3",
    "relative+dape:k=3",
]


@pytest.mark.parametrize("pe", PE)
def test_a_training_step_of_every_encoding_reads_nothing_on_the_host(pe):
    model = build_model(pe=pe, vocab_size=11, d_model=32, n_layers=2, n_heads=4, max_len=64, separator_ids=(3,))
    model = model.to("meta").train()
    tokens = torch.empty(2, 40, dtype=torch.long, device="meta")
    model(tokens).sum().backward()  # raises "Tensor.item() cannot be called on meta tensors" at a host read
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_the_meta_device_catches_a_host_read():
    # the check itself: a module that reads a value (as the learned table did to bound its index)
    x = torch.empty(3, device="meta")
    with pytest.raises(RuntimeError, match="meta"):
        int(x.max())  # .item()
    with pytest.raises(NotImplementedError, match="nonzero"):  # torch's meta kernel for a data-dependent shape
        x.nonzero()
