"""Client stop sequences: the pure filter (split anywhere, several stops, held-back prefixes) and, end to end with the
demo model, OpenAI `stop` and Anthropic `stop_sequences` (stop_reason "stop_sequence")."""
import os

import pytest

from gateway.text.stop_sequences import StopSequenceFilter

TEXT = "The answer is 42. END of story END"


def run_filter(stops, pieces):
    f = StopSequenceFilter(stops)
    out = "".join(f.push(p) for p in pieces) + f.flush()
    return out, f.matched


@pytest.mark.parametrize("stops,want,matched", [
    (["END"], "The answer is 42. ", "END"),
    (["42", "answer"], "The ", "answer"),
    (["zzz"], TEXT, None),
    ([], TEXT, None),
    (["story END", "42."], "The answer is ", "42."),
])
def test_filter_at_every_split(stops, want, matched):
    for cut in range(len(TEXT) + 1):
        for pieces in ([TEXT[:cut], TEXT[cut:]], list(TEXT)):
            assert run_filter(stops, pieces) == (want, matched), (stops, cut)


def test_a_prefix_that_never_completes_is_released():
    assert run_filter(["ENDING"], ["The END", " is near"]) == ("The END is near", None)
    assert run_filter(["ENDING"], ["The EN"]) == ("The EN", None)


from gateway_harness import REPO, Gateway  # noqa: E402

DEMO = os.path.join(REPO, "installer", "demo", "strata-demo.gguf")


@pytest.fixture(scope="module")
def demo(engine_bin):
    gw = Gateway(DEMO, engine_bin, ctx=4096)
    yield gw
    gw.stop()


def test_openai_stop(demo):
    import openai
    client = openai.OpenAI(base_url=demo.url + "/v1", api_key="none", max_retries=0, timeout=120)
    ask = [{"role": "user", "content": "What is 17 plus 25?"}]
    full = client.chat.completions.create(model="demo", messages=ask, max_tokens=120).choices[0].message.content
    assert "=" in full, full
    r = client.chat.completions.create(model="demo", messages=ask, max_tokens=120, stop="=")
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[:full.index("=")]
    chunks = client.chat.completions.create(model="demo", messages=ask, max_tokens=120, stop=["=", "zzz"], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == full[:full.index("=")]


def test_anthropic_stop_sequences(demo):
    import anthropic
    client = anthropic.Anthropic(base_url=demo.url, api_key="none", max_retries=0, timeout=120)
    ask = [{"role": "user", "content": "What is 17 plus 25?"}]
    full = client.messages.create(model="demo", max_tokens=200, messages=ask)
    text = "".join(b.text for b in full.content if b.type == "text")
    msg = client.messages.create(model="demo", max_tokens=200, messages=ask, stop_sequences=["="])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "="
    assert "".join(b.text for b in msg.content if b.type == "text") == text[:text.index("=")]
    with client.messages.stream(model="demo", max_tokens=200, messages=ask, stop_sequences=["="]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "="
