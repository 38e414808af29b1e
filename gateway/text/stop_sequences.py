"""Client stop sequences (OpenAI `stop`, Anthropic `stop_sequences`) on the streamed answer text: text is released
only when it cannot be the start of a stop string, and the answer ends at the first full match (the match itself is
not returned). Pure: no I/O."""
from __future__ import annotations


class StopSequenceFilter:
    def __init__(self, stops: list[str] | None):
        self.stops = [s for s in (stops or []) if s]
        self.held = ""          # text that may still turn into a stop string
        self.matched: str | None = None

    def push(self, text: str) -> str:
        """Feeds answer text; returns the part that is safe to show. After a match, returns ''."""
        if not self.stops or self.matched is not None:
            return "" if self.matched is not None else text
        buf = self.held + text
        first = None
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (first is None or i < first[0]):
                first = (i, s)
        if first is not None:
            self.matched = first[1]
            self.held = ""
            return buf[:first[0]]
        keep = 0     # the longest suffix of buf that is a proper prefix of a stop string
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep] if keep else buf

    def flush(self) -> str:
        """At the end of the answer: what was held back (it never became a stop string)."""
        out, self.held = self.held, ""
        return "" if self.matched is not None else out
