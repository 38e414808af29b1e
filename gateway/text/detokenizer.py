"""Incremental, UTF-8-safe decoding: token ids in, text out, never splitting a character across pieces."""
from __future__ import annotations

import codecs

from gateway.text.tokenizer import TextTokenizer


class Detokenizer:
    def __init__(self, tokenizer: TextTokenizer):
        self._tokenizer = tokenizer
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Text completed by this token ('' while a character is still incomplete)."""
        return self._decoder.decode(self._tokenizer.token_bytes(token_id))

    def flush(self) -> str:
        """Whatever is left at the end (an incomplete character becomes U+FFFD)."""
        return self._decoder.decode(b"", final=True)
