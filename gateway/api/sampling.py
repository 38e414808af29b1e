"""Request sampling fields → GEN keys (protocol.md §3): greedy unless a temperature above 0 is asked for."""
from __future__ import annotations

from gateway.engine.protocol import SAMPLING_KEYS


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
