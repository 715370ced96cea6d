"""Read a safetensors file through one open file object, trusting nothing in it.

``safetensors.safe_open`` takes a path, so a reader that checks a file and then opens it by name may get its header
from one file and its data from another (a writer renaming a new file into place in between). Here the caller opens
the file once and everything (size, header, every tensor's bytes) comes from that one descriptor. The header is
checked before any data is read: an 8-byte little-endian length, a JSON object, ``__metadata__`` a string-to-string
map, every tensor a known dtype, a shape of non-negative integers and data offsets inside the file whose length is
exactly the shape's. Anything else raises :class:`BadTensorFile`. The format is safetensors' own (written with
``safetensors.torch.save_file``); only reading is done here.
"""

from __future__ import annotations

import json
import math
import os
from typing import BinaryIO

MAX_HEADER_BYTES = 100 * 2**20

_DTYPES = {  # safetensors dtype name -> (torch dtype name, bytes per element)
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1), "U8": ("uint8", 1),
    "BOOL": ("bool", 1),
}


class BadTensorFile(ValueError):
    """The file is not a well-formed safetensors file (truncated, a bad header, offsets outside the file...)."""


def read_header(file: BinaryIO) -> tuple[dict, dict[str, str], int]:
    """``(tensors, metadata, data_start)`` from the header of the open ``file``.

    tensors: name -> ``{"dtype", "shape", "data_offsets"}`` (checked against the file's size); metadata: the
    ``__metadata__`` map (empty if absent); data_start: where the tensor bytes begin.
    """
    size = os.fstat(file.fileno()).st_size
    file.seek(0)
    prefix = file.read(8)
    if len(prefix) < 8:
        raise BadTensorFile(f"{size} bytes: too short for a safetensors header")
    length = int.from_bytes(prefix, "little")
    if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
        raise BadTensorFile(f"header length {length} does not fit a file of {size} bytes")
    raw = file.read(length)
    if len(raw) != length:
        raise BadTensorFile("the header is cut short")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise BadTensorFile(f"the header is not JSON ({type(error).__name__})") from None
    if not isinstance(header, dict):
        raise BadTensorFile(f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise BadTensorFile("__metadata__ is not a map of strings")
    data_start = 8 + length
    data_bytes = size - data_start
    for name, entry in header.items():
        _check_entry(name, entry, data_bytes)
    return header, metadata, data_start


def _check_entry(name: str, entry, data_bytes: int) -> None:
    if not isinstance(entry, dict):
        raise BadTensorFile(f"tensor {name!r}: its header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in _DTYPES:
        raise BadTensorFile(f"tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise BadTensorFile(f"tensor {name!r}: bad shape {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(n) is int for n in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_bytes):
        raise BadTensorFile(f"tensor {name!r}: data offsets {offsets!r} outside the file")
    if offsets[1] - offsets[0] != math.prod(shape) * _DTYPES[dtype][1]:
        raise BadTensorFile(f"tensor {name!r}: {offsets[1] - offsets[0]} bytes for shape {shape} {dtype}")


def read_metadata(file: BinaryIO) -> dict[str, str]:
    """The ``__metadata__`` map of the open ``file`` (no tensor data is read)."""
    return read_header(file)[1]


def read_tensors(file: BinaryIO) -> tuple[dict, dict[str, str]]:
    """``(tensors, metadata)``: every tensor of the open ``file`` on the CPU, read from that file only."""
    import torch

    header, metadata, data_start = read_header(file)
    tensors = {}
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        dtype = getattr(torch, _DTYPES[entry["dtype"]][0])
        if begin == end:
            tensors[name] = torch.empty(entry["shape"], dtype=dtype)
            continue
        buffer = bytearray(end - begin)
        file.seek(data_start + begin)
        if file.readinto(buffer) != len(buffer):
            raise BadTensorFile(f"tensor {name!r}: the file ends inside its data")
        tensors[name] = torch.frombuffer(buffer, dtype=dtype).reshape(entry["shape"])
    return tensors, metadata
