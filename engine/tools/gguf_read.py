# A small, independent GGUF reader for tests and tools: metadata with their value types, tensor infos, and any
# tensor as float32 (gguf-py's reader rejects ggml types it does not know, such as Q2_0 = 42).
from __future__ import annotations

import struct
import sys

import numpy as np

from gguf_quant import TYPE_NAMES, TYPES, dequantize

VALUE_TYPES = {0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32", 5: "INT32", 6: "FLOAT32", 7: "BOOL",
               8: "STRING", 9: "ARRAY", 10: "UINT64", 11: "INT64", 12: "FLOAT64"}
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class GGUFFile:
    """fields: {key: (value, type name, element type name or None)}; tensors: {name: (ne tuple, type name, offset)}."""

    def __init__(self, path: str):
        self.path = path
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        if bytes(self.buf[:4]) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (magic {bytes(self.buf[:4])!r})")
        self.pos = 4
        self.version = self._scalar(4)
        n_tensors, n_kv = self._scalar(10), self._scalar(10)
        self.fields = {}
        for _ in range(n_kv):
            key = self._string()
            vt = self._scalar(4)
            if vt == 9:
                et = self._scalar(4)
                n = self._scalar(10)
                self.fields[key] = ([self._value(et) for _ in range(n)], "ARRAY", VALUE_TYPES[et])
            else:
                self.fields[key] = (self._value(vt), VALUE_TYPES[vt], None)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._string()
            nd = self._scalar(4)
            ne = tuple(self._scalar(10) for _ in range(nd))
            t = self._scalar(4)
            off = self._scalar(10)
            if t not in TYPE_NAMES:
                raise ValueError(f"{path}: tensor {name} has ggml type {t}, unknown to gguf_quant.TYPES")
            self.tensors[name] = (ne, TYPE_NAMES[t], off)
        align = self.fields.get("general.alignment", (32,))[0]
        self.data_start = (self.pos + align - 1) // align * align

    def _scalar(self, vt: int):
        fmt = _SCALAR[vt]
        n = struct.calcsize(fmt)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return v

    def _string(self) -> str:
        n = self._scalar(10)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8")
        self.pos += n
        return s

    def _value(self, vt: int):
        return self._string() if vt == 8 else self._scalar(vt)

    def value(self, key: str):
        return self.fields[key][0]

    def raw(self, name: str) -> np.ndarray:
        ne, t, off = self.tensors[name]
        _, bs, nb = TYPES[t]
        n = int(np.prod(ne))
        start = self.data_start + off
        return np.asarray(self.buf[start:start + n // bs * nb])

    def tensor_f32(self, name: str) -> np.ndarray:
        """The tensor dequantized to float32, in numpy order (reversed ne)."""
        ne, t, _ = self.tensors[name]
        shape = tuple(reversed(ne))
        raw = self.raw(name)
        if t == "F32":
            return raw.view(np.float32).reshape(shape).copy()
        if t == "F16":
            return raw.view(np.float16).astype(np.float32).reshape(shape)
        return dequantize(raw.reshape(-1, raw.size // max(1, int(np.prod(shape[:-1])))).copy(), t, shape)


if __name__ == "__main__":
    f = GGUFFile(sys.argv[1])
    for k, (v, t, et) in f.fields.items():
        shown = (f"[{len(v)} × {et}] " + repr(v[:8])) if t == "ARRAY" else repr(v)[:100]
        print(f"{k} ({t}): {shown}")
    for name, (ne, t, off) in f.tensors.items():
        print(f"{name:48s} {t:8s} {list(ne)}")
