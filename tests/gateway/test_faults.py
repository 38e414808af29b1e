"""Faults, each against the real gateway and engine: client disconnects mid-prompt and mid-answer, kill -9 of the
engine mid-stream, a hung (SIGSTOPped) engine, malformed JSON, unknown fields, wrong types, a 10 MB body, and eight
clients at once answered in order without mixing."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import requests

CHAT = "/v1/chat/completions"


def chat(url, content="Hi", max_tokens=4, stream=False, timeout=120, **extra):
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "stream": stream, **extra}
    return requests.post(url + CHAT, json=body, stream=stream, timeout=timeout)


def engine_cancels(g) -> int:
    return g.read_log().count(", cancel")


def test_disconnect_mid_prompt_then_next_request_runs_at_once(start_gateway):
    g = start_gateway("--engine-arg=--chunk", "--engine-arg=1", "--engine-arg=--threads", "--engine-arg=1",
                      ctx=8192)
    long_text = "hello " * 7000   # ~1 s of prompt reading, one token per chunk
    r = chat(g.url, long_text, max_tokens=8, stream=True)
    lines = r.iter_lines()  # kept: a dropped iterator closes the connection
    first = next(lines)
    assert first.startswith(b"data: ")
    deadline = time.time() + 10
    while not requests.get(g.url + "/status").json().get("prompt_tokens_done") and time.time() < deadline:
        time.sleep(0.01)
    status = requests.get(g.url + "/status").json()
    assert status["state"] == "reading prompt" and status["prompt_tokens_done"] < status["prompt_tokens_total"]
    r.close()  # the client goes away while the prompt is read
    t0 = time.time()
    ok = chat(g.url, "Hello", max_tokens=3)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
    assert time.time() - t0 < 10
    assert engine_cancels(g) == 1
    assert "DONE" not in ok.text


def test_disconnect_mid_answer(start_gateway):
    g = start_gateway()
    r = chat(g.url, "Tell me a long story", max_tokens=1500, stream=True, reasoning_effort="none")
    lines = r.iter_lines()
    got = [next(lines) for _ in range(6)]
    assert all(l.startswith(b"data: ") or not l for l in got)
    r.close()
    ok = chat(g.url, "Hello", max_tokens=3)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
    assert engine_cancels(g) == 1
    # A non-stream request whose client leaves is cancelled too.
    try:
        chat(g.url, "Another long one", max_tokens=1800, timeout=0.3)
    except requests.exceptions.ReadTimeout:
        pass
    assert chat(g.url, "Hello", max_tokens=2).status_code == 200
    assert engine_cancels(g) == 2


def test_engine_killed_mid_stream(start_gateway):
    g = start_gateway()
    pid = g.engine_pid()
    r = chat(g.url, "Go on", max_tokens=1800, stream=True, reasoning_effort="none")
    lines = r.iter_lines()
    for _ in range(4):
        next(lines)
    os.kill(pid, signal.SIGKILL)
    rest = [l for l in lines if l]
    errors = [json.loads(l[6:]) for l in rest if l.startswith(b"data: {\"error\"")]
    assert errors and errors[0]["error"]["code"] == "engine_unavailable"
    assert "exited" in errors[0]["error"]["message"]
    assert rest[-1] == b"data: [DONE]"
    again = chat(g.url, "Hello", max_tokens=2)
    assert again.status_code == 200
    assert g.engine_pid() != pid
    assert requests.get(g.url + "/health").json()["engine"]["restarts"] == 1


def test_hung_engine_is_killed_and_restarted(start_gateway):
    g = start_gateway("--engine-timeout", "2")
    pid = g.engine_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.time()
        r = chat(g.url, "Hello", max_tokens=3)
        assert r.status_code == 503 and "said nothing for 2 s" in r.json()["error"]["message"]
        assert 1.5 < time.time() - t0 < 15
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    r = chat(g.url, "Hello", max_tokens=3)
    assert r.status_code == 200 and g.engine_pid() != pid


def test_bad_bodies(gateway):
    r = requests.post(gateway.url + CHAT, data=b"{not json", timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = requests.post(gateway.url + "/v1/messages", data=b"[1, 2", timeout=30)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = requests.post(gateway.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}],
                                               "max_tokens": "many"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    r = requests.post(gateway.url + CHAT, json={"messages": "hi"}, timeout=30)
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    r = requests.post(gateway.url + "/v1/messages", json={"model": "m", "max_tokens": 3,
                                                          "messages": [{"role": "user", "content": 5}]}, timeout=30)
    assert r.status_code == 400 and "messages.0.content" in r.json()["error"]["message"]
    r = requests.post(gateway.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                               "frobnicate": {"x": 1}, "logit_bias": {"5": 1}, "user": "me",
                                               "parallel_tool_calls": False}, timeout=30)
    assert r.status_code == 200


def test_ten_megabyte_body(gateway):
    text = "lorem ipsum dolor " * (10 * 1024 * 1024 // 18)
    r = requests.post(gateway.url + CHAT, json={"messages": [{"role": "user", "content": text}], "max_tokens": 2},
                      timeout=300)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert "nothing was cut" in r.json()["error"]["message"]
    assert chat(gateway.url, "Hello", max_tokens=2).status_code == 200


def test_eight_clients_in_order_none_mixed(gateway):
    prompts = [f"Client {i} asks about topic {i * 7}" for i in range(8)]
    alone = [chat(gateway.url, p, max_tokens=24, reasoning_effort="none").json()["choices"][0]["message"]["content"]
             for p in prompts]
    results, finished = [None] * 8, []

    def client(i):
        r = chat(gateway.url, prompts[i], max_tokens=24, reasoning_effort="none")
        results[i] = r.json()["choices"][0]["message"]["content"]
        finished.append(i)

    threads = []
    for i in range(8):
        threads.append(threading.Thread(target=client, args=(i,)))
        threads[-1].start()
        time.sleep(0.02)
    for t in threads:
        t.join(120)
    assert results == alone        # each got its own answer (greedy: the same as alone)
    assert finished == list(range(8))
