"""A safetensors file written one tensor at a time, so that packing a large GGUF never holds its packed weights
all at once (safetensors' save_file takes them all in one dict).

The tensors' bytes go to a side file as they come; close() writes the header (each tensor's dtype, shape and
byte range) and then the bytes, copied in chunks. The format: an 8-byte little-endian header length, the JSON
header padded with spaces to a multiple of 8, the data."""

import json
import shutil
import struct
from pathlib import Path

import torch

_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int8: "I8", torch.uint8: "U8",
           torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}


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
        self.data.write(raw.tobytes())
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
