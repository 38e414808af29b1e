"""Request sampling fields → GEN keys (protocol.md §3): greedy unless a temperature above 0 is asked for. The
server's defaults (--sampling-defaults, written by the installer into strata-<model>.json) fill in the fields a
request leaves out; a field the request sets, even to its neutral value (temperature 0), wins."""
from __future__ import annotations

import json

from gateway.engine.protocol import SAMPLING_KEYS

# The fields --sampling-defaults may set (gen_keys' parameters) and their ranges.
DEFAULT_FIELDS = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "top_k": (0, 64), "min_p": (0.0, 1.0),
                  "repeat_penalty": (0.0, 10.0), "frequency_penalty": (-2.0, 2.0), "presence_penalty": (-2.0, 2.0),
                  "seed": (0, 2 ** 63 - 1)}


def parse_defaults(text: str) -> dict:
    """--sampling-defaults' JSON object → {field: number}; ValueError naming what is wrong."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--sampling-defaults is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError("--sampling-defaults must be a JSON object such as {\"temperature\": 0.7}")
    out = {}
    for key, v in value.items():
        if key not in DEFAULT_FIELDS:
            raise ValueError(f"--sampling-defaults: unknown field {key!r} (known: {', '.join(DEFAULT_FIELDS)})")
        lo, hi = DEFAULT_FIELDS[key]
        integral = isinstance(lo, int)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (integral and not float(v).is_integer()):
            raise ValueError(f"--sampling-defaults: {key} must be {'a whole number' if integral else 'a number'}, "
                             f"got {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"--sampling-defaults: {key} must be between {lo} and {hi}, got {v}")
        out[key] = int(v) if integral else float(v)
    return out


def with_defaults(fields: dict, defaults: dict | None) -> dict:
    """The request's fields (None = left out) with the server's defaults filled in where it left them out."""
    return {k: (v if v is not None else (defaults or {}).get(k)) for k, v in fields.items()}


def gen_keys(temperature=None, top_p=None, top_k=None, min_p=None, repeat_penalty=None, frequency_penalty=None,
             presence_penalty=None, seed=None) -> dict:
    keys = {"temperature": temperature if temperature and temperature > 0 else None,
            "top_p": top_p if top_p is not None and top_p < 1 else None,
            "top_k": min(top_k, 64) if top_k else None,
            "min_p": min_p or None,
            "repeat_penalty": repeat_penalty if repeat_penalty not in (None, 1, 1.0) else None,
            "frequency_penalty": frequency_penalty or None,
            "presence_penalty": presence_penalty or None,
            "seed": seed}
    assert set(keys) <= set(SAMPLING_KEYS)
    return {k: v for k, v in keys.items() if v is not None}
