"""Counters and timings for /metrics and /status (what the chat page's monitor view shows)."""
from __future__ import annotations

import collections
import time


class Metrics:
    def __init__(self):
        self.started_at = time.time()
        self.requests = 0
        self.requests_failed = 0
        self.in_flight = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.prompt_ms = 0.0
        self.decode_ms = 0.0
        self.cache_hits = 0             # the engine's expert cache (GPU), summed over requests
        self.cache_lookups = 0
        self.recent: collections.deque[dict] = collections.deque(maxlen=20)

    def request_started(self) -> None:
        self.requests += 1
        self.in_flight += 1

    def request_failed(self) -> None:
        self.requests_failed += 1

    def request_finished(self, final, seconds: float) -> None:
        self.prompt_tokens += final.prompt_tokens
        self.cached_tokens += final.cached_tokens
        self.completion_tokens += final.completion_tokens
        self.prompt_ms += final.prompt_ms
        self.decode_ms += final.decode_ms
        self.cache_hits += final.cache_hits
        self.cache_lookups += final.cache_lookups
        t = final.timings()
        row = {"time": time.time(), "prompt_tokens": final.prompt_tokens,
               "cached_tokens": final.cached_tokens, "completion_tokens": final.completion_tokens,
               "prompt_per_second": round(t["prompt_per_second"], 1),
               "predicted_per_second": round(t["predicted_per_second"], 1),
               "finish_reason": final.finish_reason, "seconds": round(seconds, 3)}
        if final.cache_lookups:
            row["expert_cache_hit_rate"] = round(final.cache_hits / final.cache_lookups, 4)
        self.recent.append(row)

    def snapshot(self) -> dict:
        return {"uptime_s": round(time.time() - self.started_at, 1), "requests": self.requests,
                "requests_failed": self.requests_failed, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens, "completion_tokens": self.completion_tokens,
                "prompt_per_second": round(self._rate(self.prompt_tokens - self.cached_tokens, self.prompt_ms), 1),
                "predicted_per_second": round(self._rate(self.completion_tokens, self.decode_ms), 1),
                **self._cache(), "recent": list(self.recent)}

    def _cache(self) -> dict:
        """The expert cache's share of hits since start: only where the engine has a cache (it reports look-ups)."""
        if not self.cache_lookups:
            return {}
        return {"expert_cache_hits": self.cache_hits, "expert_cache_lookups": self.cache_lookups,
                "expert_cache_hit_rate": round(self.cache_hits / self.cache_lookups, 4)}

    @staticmethod
    def _rate(n: int, ms: float) -> float:
        return n * 1000.0 / ms if ms > 0 else 0.0
