"""/metrics' expert-cache figures (the monitor's "Expert cache hit rate" card): the hits and look-ups an engine with
a GPU expert cache reports in DONE reach the request's row and the totals; an engine without a cache (the CPU one
here) reports none, and /metrics then has no rate rather than a made-up 0."""
import requests

from gateway.api.chat_job import Final
from gateway.engine.protocol import parse_line
from gateway.metrics import Metrics


def final_of(done_line: str) -> Final:
    d = parse_line(done_line)
    return Final(d.finish, d.prompt, d.generated, d.reused, d.prompt_ms, d.decode_ms, d.drafts_offered,
                 d.drafts_accepted, None, d.cache_hits, d.cache_lookups)


def test_hits_from_done_reach_the_request_rows_and_totals():
    m = Metrics()
    m.request_finished(final_of("DONE 8 40 10.0 50.0 stop 0 0 0 300 500"), 0.2)
    m.request_finished(final_of("DONE 4 12 5.0 20.0 length 0 0 0 90 100 cpu_ms=3.0"), 0.1)
    s = m.snapshot()
    assert (s["expert_cache_hits"], s["expert_cache_lookups"]) == (390, 600)
    assert s["expert_cache_hit_rate"] == 0.65
    assert [r["expert_cache_hit_rate"] for r in s["recent"]] == [0.6, 0.9]


def test_no_cache_no_rate():
    m = Metrics()
    m.request_finished(final_of("DONE 8 40 10.0 50.0 stop 0 0 0 0 0"), 0.2)
    s = m.snapshot()
    assert "expert_cache_hit_rate" not in s and "expert_cache_hit_rate" not in s["recent"][0]


def test_cpu_engine_reports_no_cache_rate(gateway):
    requests.post(gateway.url + "/v1/chat/completions",
                  json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}, timeout=60)
    m = requests.get(gateway.url + "/metrics", timeout=10).json()
    assert m["requests"] >= 1 and "expert_cache_hit_rate" not in m
