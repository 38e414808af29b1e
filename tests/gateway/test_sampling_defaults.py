"""--sampling-defaults (the installer passes strata-<model>.json's sampling defaults): fields a request leaves out
take the server's defaults, fields it sets win (an explicit temperature 0 is greedy), on both APIs; bad values stop
the gateway with a message that names them; the launcher passes the config's defaults."""
import subprocess
import sys

import pytest
import requests

from gateway.api.sampling import parse_defaults
from gateway_harness import REPO

SAMPLED = '{"temperature": 1.5, "top_k": 40, "seed": 11}'


def chat(g, **extra) -> str:
    body = {"messages": [{"role": "user", "content": "Tell me something."}], "max_tokens": 24, **extra}
    r = requests.post(g.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    m = r.json()["choices"][0]["message"]
    return (m.get("reasoning_content") or "") + m["content"]   # the random tiny model mostly "thinks"


def message(g, **extra) -> str:
    body = {"model": "m", "max_tokens": 24, "messages": [{"role": "user", "content": "Tell me something."}], **extra}
    r = requests.post(g.url + "/v1/messages", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return "".join(b.get("text", "") + b.get("thinking", "") for b in r.json()["content"])


def test_parse_defaults():
    assert parse_defaults('{"temperature": 0.7, "top_k": 40, "seed": 3}') == {"temperature": 0.7, "top_k": 40, "seed": 3}
    for text, words in (('{"temprature": 1}', "unknown field 'temprature'"), ('{"top_k": 2.5}', "whole number"),
                        ('{"top_p": 1.5}', "between 0.0 and 1.0"), ('{"temperature": "hot"}', "a number"),
                        ('[0.7]', "JSON object"), ("{temperature", "not JSON"), ('{"seed": true}', "whole number")):
        with pytest.raises(ValueError, match=words):
            parse_defaults(text)


def test_defaults_fill_what_requests_leave_out(gateway, start_gateway):
    greedy_chat, greedy_message = chat(gateway), message(gateway)
    g = start_gateway("--sampling-defaults", SAMPLED)
    sampled = chat(g)
    assert sampled == chat(g) != greedy_chat          # the default seed repeats the same sampled answer
    assert chat(g, temperature=0) == greedy_chat      # a field the request sets wins, even the neutral one
    assert chat(g, seed=12) != sampled                # the request's seed, the defaults' temperature
    assert message(g) != greedy_message and message(g, temperature=0) == greedy_message


def test_bad_defaults_stop_the_gateway_with_a_message(realvocab_gguf, engine_bin):
    p = subprocess.run([sys.executable, "-m", "gateway", "--model", realvocab_gguf, "--engine", engine_bin,
                        "--sampling-defaults", '{"temperature": 9}'], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "temperature must be between 0.0 and 2.0, got 9" in p.stderr, p.stderr


def test_launcher_passes_the_configs_defaults(tmp_path):
    from installer.config_writer import StrataConfig
    from installer.launcher import gateway_command
    config = StrataConfig(name="x", model="m.gguf", engine="strata", context=4096,
                          sampling_defaults={"temperature": 0.6, "top_p": 0.95})
    command = gateway_command(config, 8080, say=lambda *_: None)
    i = command.index("--sampling-defaults")
    assert parse_defaults(command[i + 1]) == {"temperature": 0.6, "top_p": 0.95}
