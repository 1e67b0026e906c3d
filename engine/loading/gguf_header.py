"""What a GGUF file holds, read from its header alone in a fraction of a second: the metadata's scalars, how
many items each array has, and every tensor's name, type and shape. Enough to refuse an unsupported
architecture or tensor type before any conversion, and to list a file's quantization and the memory it will take.

(gguf's own GGUFReader parses every array element, the whole vocabulary included: seconds on a large file.)
Layout (GGUF v2/v3, little-endian): magic "GGUF", version u32, tensor count u64, metadata count u64; then each
metadata pair (key string, value type u32, value), then each tensor's info (name string, dimension count u32,
dimensions u64 each, type u32, data offset u64). A string is a u64 length and its bytes. The tensors' data follows,
from the next multiple of general.alignment (default 32); each offset counts from there.
"""

import mmap
import struct
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class WeightForm(StrEnum):
    """How the engine holds a GGUF matrix (packed_linear.py explains each, and why)."""

    INT4 = "int4"  # one int4 matrix, a bfloat16 scale and zero per 32 weights of a row
    INT4_X2 = "int4 x2"  # two int4 matrices whose products add up to the int8 codes' (Q8_0)
    INT8 = "int8"  # int8 rows, a bfloat16 scale per row
    BF16 = "bf16"  # a dense bfloat16 matrix


# How the engine holds each GGUF tensor type, and the bytes a weight then takes
HELD_AS = {"Q4_0": WeightForm.INT4, "Q4_1": WeightForm.INT4, "Q4_K": WeightForm.INT4, "Q8_0": WeightForm.INT4_X2,
           "Q5_0": WeightForm.INT8, "Q5_1": WeightForm.INT8, "Q5_K": WeightForm.INT8, "Q6_K": WeightForm.INT8,
           "F16": WeightForm.BF16, "BF16": WeightForm.BF16, "F32": WeightForm.BF16}
BYTES_PER_WEIGHT = {WeightForm.INT4: 0.625, WeightForm.INT4_X2: 1.25, WeightForm.INT8: 1.0, WeightForm.BF16: 2.0}
# what a GGUF type takes in the file, per weight (block bytes / block weights)
FILE_BYTES_PER_WEIGHT = {"Q4_0": 18 / 32, "Q4_1": 20 / 32, "Q4_K": 144 / 256, "Q8_0": 34 / 32, "Q5_0": 22 / 32,
                         "Q5_1": 24 / 32, "Q5_K": 176 / 256, "Q6_K": 210 / 256, "F16": 2, "BF16": 2, "F32": 4}


def held_as_head(form: WeightForm) -> WeightForm:
    """How the logits head holds a matrix that other layers would hold as `form`: one product per decoded token on
    the largest matrix of a small model, so per-row int8 instead of two int4 planes (Q8_0)."""
    return WeightForm.INT8 if form is WeightForm.INT4_X2 else form


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32  # of the data section, when general.alignment does not say


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type_name: str  # GGML's name: "Q4_K", "F32", ...
    shape: tuple[int, ...]  # GGUF order: the fastest-varying dimension first
    offset: int = 0  # where its data starts, from the start of the data section

    @property
    def num_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass(frozen=True)
class GGUFHeader:
    metadata: dict[str, object]  # scalars and strings; an array is its item count
    tensors: list[TensorInfo]
    data_start: int = 0  # where the tensors' data section starts in the file

    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")

    def value(self, key: str):
        """A metadata value by its gguf.Keys name, "{arch}" read as the file's architecture; None if absent."""
        return self.metadata.get(key.format(arch=self.architecture))

    def type_counts(self) -> Counter:
        """Weights per tensor type, by GGML type name."""
        counts: Counter = Counter()
        for tensor in self.tensors:
            counts[tensor.type_name] += tensor.num_elements
        return counts

    def held_bytes(self) -> int:
        """The memory the engine's packed weights take: every matrix as HELD_AS says, the token embedding's raw
        rows, and the small tensors in float32. A tied logits head is packed from the embedding (held_as_head);
        when that is per-row int8, the embedding reads its rows and keeps no raw copy."""
        total = 0.0
        tied = not any(t.name == "output.weight" for t in self.tensors)
        for tensor in self.tensors:
            if len(tensor.shape) < 2:
                total += 4 * tensor.num_elements
            elif tensor.name == "token_embd.weight":
                raw = FILE_BYTES_PER_WEIGHT.get(tensor.type_name, 4)
                head = held_as_head(HELD_AS.get(tensor.type_name, WeightForm.BF16))
                per_weight = raw if not tied else BYTES_PER_WEIGHT[head] + (0 if head is WeightForm.INT8 else raw)
                total += tensor.num_elements * per_weight
            else:
                total += tensor.num_elements * BYTES_PER_WEIGHT[HELD_AS.get(tensor.type_name, WeightForm.BF16)]
        return int(total)

    @property
    def quantization(self) -> str:
        """The file's main type: the one holding most weights (a Q4_K_M file says Q4_K)."""
        counts = self.type_counts()
        return counts.most_common(1)[0][0] if counts else "?"


def read_header(path: Path | str) -> GGUFHeader:
    """Raises ValueError for a file that is not GGUF."""
    from gguf import GGMLQuantizationType

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        reader = _Reader(data, 4)
        version = reader.scalar("<I")
        if version < 2:
            raise ValueError(f"{path} is GGUF version {version}; versions 2 and 3 are supported")
        num_tensors, num_metadata = reader.scalar("<Q"), reader.scalar("<Q")
        metadata = {}
        for _ in range(num_metadata):
            key = reader.string()
            metadata[key] = reader.value(reader.scalar("<I"))
        tensors = []
        for _ in range(num_tensors):
            name = reader.string()
            shape = tuple(reader.scalar("<Q") for _ in range(reader.scalar("<I")))
            type_id = reader.scalar("<I")
            offset = reader.scalar("<Q")
            try:
                type_name = GGMLQuantizationType(type_id).name
            except ValueError:
                type_name = f"type {type_id}"
            tensors.append(TensorInfo(name, type_name, shape, offset))
        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    return GGUFHeader(metadata, tensors, -(-reader.at // alignment) * alignment)


class _Reader:
    def __init__(self, data: mmap.mmap, at: int):
        self.data, self.at = data, at

    def scalar(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        text = self.data[self.at : self.at + length].decode("utf-8", errors="replace")
        self.at += length
        return text

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = self.scalar("<I"), self.scalar("<Q")
            if item_kind in _SCALARS:
                self.at += count * struct.calcsize(_SCALARS[item_kind])
            else:
                for _ in range(count):
                    self.value(item_kind)
            return count
        raise ValueError(f"unknown GGUF metadata type {kind}")
