"""A safetensors file written one tensor at a time, and read with plain reads.

Writing: packing a large GGUF never holds its packed weights all at once (safetensors' save_file takes them all in
one dict). The tensors' bytes go to a side file as they come; close() writes the header (each tensor's dtype,
shape and byte range) and then the bytes, copied in chunks.

Reading: safetensors' own reader maps the file, and every page it copies a tensor from stays in the process's
resident memory until the file is closed, on top of the tensors themselves (65 MB of a 1B model's 766 MB file at
the peak); read_tensors reads each tensor into its own memory, so the file's pages stay in the page cache alone.

The format: an 8-byte little-endian header length, the JSON header padded with spaces to a multiple of 8, the
data."""

import json
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import torch

_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int8: "I8", torch.uint8: "U8",
           torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}
_TORCH_DTYPES = {name: dtype for dtype, name in _DTYPES.items()}


def read_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield every (name, tensor) of a safetensors file, in file order, each read into memory of its own."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        header.pop("__metadata__", None)
        for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
            begin, end = entry["data_offsets"]
            tensor = torch.empty(entry["shape"], dtype=_TORCH_DTYPES[entry["dtype"]])
            f.seek(8 + length + begin)
            if f.readinto(tensor.reshape(-1).view(torch.uint8).numpy()) != end - begin:
                raise ValueError(f"{path}: tensor {name!r} is cut short")
            yield name, tensor


class TensorFileWriter:
    def __init__(self, path: Path):
        self.path = path
        self.data_path = path.with_name(path.name + ".data")
        self.data = open(self.data_path, "wb")  # closed by close() or abort()
        self.header: dict[str, dict] = {}
        self.size = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        if name in self.header:
            raise ValueError(f"tensor {name!r} written twice")
        tensor = tensor.detach().cpu().contiguous()
        raw = tensor.reshape(-1).view(torch.uint8).numpy()
        self.data.write(raw.data)  # the tensor's own buffer: no copy of it
        self.header[name] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape),
                             "data_offsets": [self.size, self.size + raw.size]}
        self.size += raw.size

    def close(self, metadata: dict[str, str]) -> None:
        self.data.close()
        header = json.dumps({"__metadata__": metadata, **self.header}, separators=(",", ":")).encode()
        header += b" " * (-len(header) % 8)
        try:
            with open(self.path, "wb") as out, open(self.data_path, "rb") as data:
                out.write(struct.pack("<Q", len(header)))
                out.write(header)
                shutil.copyfileobj(data, out, 16 << 20)
        finally:
            self.data_path.unlink(missing_ok=True)

    def abort(self) -> None:
        self.data.close()
        self.data_path.unlink(missing_ok=True)
