"""The gateway's half of protocol.md, pure: a request → its GEN line; an engine line → a typed event."""
from __future__ import annotations

import base64
from dataclasses import dataclass

SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "frequency_penalty",
                 "presence_penalty", "penalty_window", "seed")


class ProtocolError(ValueError):
    """A line from the engine that protocol.md does not allow: the stream can no longer be trusted."""


@dataclass(frozen=True)
class Info:
    key: str
    value: str


@dataclass(frozen=True)
class Ready:
    max_context: int
    honours_stop: bool


@dataclass(frozen=True)
class Resume:
    reused: int


@dataclass(frozen=True)
class Progress:
    reached: int
    total: int
    ms: float
    tokens_per_s: float


@dataclass(frozen=True)
class Reused:
    reused: int


@dataclass(frozen=True)
class Token:
    id: int
    logprob: float | None = None                  # with GEN's logprobs=N: the token's log-probability
    top: tuple[tuple[int, float], ...] = ()       # and its N most likely alternatives (id, logprob), best first


@dataclass(frozen=True)
class Done:
    generated: int
    prompt: int
    prompt_ms: float
    decode_ms: float
    finish: str            # stop | length | cancel
    drafts_accepted: int
    drafts_offered: int
    reused: int
    cache_hits: int
    cache_lookups: int


@dataclass(frozen=True)
class Err:
    message: str


Event = Info | Ready | Resume | Progress | Reused | Token | Done | Err


def _number(v):
    return repr(v) if isinstance(v, float) else str(v)


def format_gen(max_new: int, ids: list[int], sampling: dict | None = None, embeddings_file: str | None = None,
               logprobs: int | None = None, grammar: str | None = None, grammar_after: int | None = None) -> str:
    """GEN (or GENI with an embeddings file) line without its newline; sampling keys with None values are left out;
    logprobs: the alternatives each T line should carry (0..20), None for plain T lines; grammar: the text the answer
    must match (docs/grammar.md), from the token grammar_after on when that is given."""
    if max_new < 1:
        raise ValueError(f"max_new {max_new} must be >= 1")
    if not ids:
        raise ValueError("a request needs at least one prompt token")
    parts = ["GENI" if embeddings_file else "GEN", str(max_new)]
    for key, value in (sampling or {}).items():
        if value is None:
            continue
        if key not in SAMPLING_KEYS:
            raise ValueError(f"unknown sampling key {key!r}")
        parts.append(f"{key}={_number(value)}")
    if logprobs is not None:
        if not 0 <= logprobs <= 20:
            raise ValueError(f"logprobs {logprobs} must be 0..20")
        parts.append(f"logprobs={logprobs}")
    if grammar is not None:
        parts.append("grammar=" + base64.urlsafe_b64encode(grammar.encode("utf-8")).decode("ascii").rstrip("="))
        if grammar_after is not None:
            parts.append(f"grammar_after={grammar_after}")
    if embeddings_file:
        if " " in embeddings_file:
            raise ValueError(f"embeddings file path {embeddings_file!r} contains a space")
        parts.append(embeddings_file)
    parts.append(",".join(str(i) for i in ids))
    return " ".join(parts)


def parse_line(line: str) -> Event:
    line = line.rstrip("\r\n")
    word, _, rest = line.partition(" ")
    f = rest.split(" ") if rest else []
    try:
        if word == "T" and len(f) == 1:
            return Token(int(f[0]))
        if word == "T" and len(f) in (2, 3):   # with logprobs=N: T <id> <logprob> [<id>:<logprob>,…]
            top = tuple((int(i), float(v)) for i, _, v in (p.partition(":") for p in f[2].split(","))) \
                if len(f) == 3 else ()
            return Token(int(f[0]), float(f[1]), top)
        if word == "PP" and len(f) == 4:
            return Progress(int(f[0]), int(f[1]), float(f[2]), float(f[3]))
        if word == "INFO":
            key, eq, value = rest.partition("=")
            if eq and key:
                return Info(key, value)
        if word == "READY" and len(f) >= 1:
            return Ready(int(f[0]), "stop" in f[1:])
        if word == "RESUME" and len(f) == 1:
            return Resume(int(f[0]))
        if word == "REUSED" and len(f) == 1:
            return Reused(int(f[0]))
        # Fields after the ten are optional key=value counters (protocol.md §4); this gateway does not use them.
        if word == "DONE" and len(f) >= 10 and f[4] in ("stop", "length", "cancel"):
            return Done(int(f[0]), int(f[1]), float(f[2]), float(f[3]), f[4], int(f[5]), int(f[6]), int(f[7]),
                        int(f[8]), int(f[9]))
        if word == "ERR":
            return Err(rest)
    except ValueError:
        pass
    raise ProtocolError(f"unexpected line from the engine: {line[:200]!r}")
