"""What the gateway needs from a GGUF's metadata: name, context length, the tokenizer.ggml.* arrays and the chat
template. A small reader of the key/value section only (GGUF v2/v3); the gguf package's reader gives the same values
(tests/gateway/test_text.py) but takes ~30 s on a 248k-token vocabulary, this one well under a second."""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5

# GGUF value types: id -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class ModelMeta:
    name: str
    architecture: str
    context_length: int | None
    tokens: list[str] | None          # tokenizer.ggml.tokens (byte-level unicode strings)
    token_types: list[int] | None     # tokenizer.ggml.token_type
    merges: list[str] | None          # "a b" pairs
    eos_id: int | None
    chat_template: str | None


class _Cursor:
    def __init__(self, buf, path: str):
        self.buf, self.pos, self.path = buf, 0, path

    def unpack(self, fmt: str):
        try:
            (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error:
            raise ValueError(f"{self.path}: truncated GGUF metadata at byte {self.pos}") from None
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError(f"{self.path}: string of {n} bytes at byte {self.pos} runs past the end of the file")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = self.unpack("<I"), self.unpack("<Q")
            if item_kind in _SCALARS:
                fmt = _SCALARS[item_kind]
                size = struct.calcsize(fmt)
                if self.pos + size * count > len(self.buf):
                    raise ValueError(f"{self.path}: array of {count} items at byte {self.pos} runs past the end")
                items = list(struct.unpack_from(f"<{count}{fmt[1]}", self.buf, self.pos))
                self.pos += size * count
                return items
            return [self.value(item_kind) for _ in range(count)]
        raise ValueError(f"{self.path}: unknown GGUF value type {kind} at byte {self.pos}")


def read_gguf_kv(path: str) -> dict:
    """Every metadata key of a GGUF file with its value (arrays as lists)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf, path)
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (magic {bytes(buf[:4])!r}, expected b'GGUF')")
        cur.pos = 4
        version = cur.unpack("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} (expected 2 or 3)")
        cur.unpack("<Q")  # tensor count
        n_kv = cur.unpack("<Q")
        out = {}
        for _ in range(n_kv):
            key = cur.string()
            out[key] = cur.value(cur.unpack("<I"))
        return out


def read_gguf_meta(path: str) -> ModelMeta:
    kv = read_gguf_kv(path)
    arch = kv.get("general.architecture") or ""
    ctx = kv.get(f"{arch}.context_length") if arch else None
    return ModelMeta(
        name=kv.get("general.name") or "",
        architecture=arch,
        context_length=int(ctx) if ctx is not None else None,
        tokens=kv.get("tokenizer.ggml.tokens"),
        token_types=kv.get("tokenizer.ggml.token_type"),
        merges=kv.get("tokenizer.ggml.merges"),
        eos_id=kv.get("tokenizer.ggml.eos_token_id"),
        chat_template=kv.get("tokenizer.chat_template"),
    )
