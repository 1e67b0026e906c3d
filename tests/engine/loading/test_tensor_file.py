"""The safetensors file written one tensor at a time reads back, bit for bit, with safetensors and read_tensors."""

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from localchat.engine.loading.tensor_file import TensorFileWriter, read_tensors


def test_tensors_written_one_at_a_time_read_back_with_safetensors_and_plain_reads(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {
        "a.float": torch.randn(3, 5, generator=gen),
        "a.bf16": torch.randn(7, generator=gen).bfloat16(),
        "b.int8": torch.randint(-128, 127, (4, 6), generator=gen, dtype=torch.int8),
        "b.uint8": torch.randint(0, 255, (2, 3, 4), generator=gen, dtype=torch.uint8),
        "c.scalar_like": torch.tensor([42]),
        "c.transposed": torch.randn(4, 3, generator=gen).t(),  # not contiguous
        "c.empty": torch.zeros(0, 4),
    }
    writer = TensorFileWriter(tmp_path / "out.safetensors")
    for name, tensor in tensors.items():
        writer.add(name, tensor)
    writer.close({"format": "pt"})
    assert [p.name for p in tmp_path.iterdir()] == ["out.safetensors"]  # the side file is gone
    read = load_file(tmp_path / "out.safetensors")
    assert read.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert read[name].dtype == tensor.dtype and torch.equal(read[name], tensor), name
    with safe_open(tmp_path / "out.safetensors", framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
    read = dict(read_tensors(tmp_path / "out.safetensors"))
    assert read.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert read[name].dtype == tensor.dtype and torch.equal(read[name], tensor), name


def test_a_name_twice_is_refused_and_abort_leaves_nothing(tmp_path):
    writer = TensorFileWriter(tmp_path / "out.safetensors")
    writer.add("x", torch.ones(2))
    with pytest.raises(ValueError, match="written twice"):
        writer.add("x", torch.ones(2))
    writer.abort()
    assert list(tmp_path.iterdir()) == []
