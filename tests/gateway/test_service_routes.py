"""/health, /status, /metrics, /v1/models, HEAD /, the chat page and its files, and the API key rules."""
from __future__ import annotations

import os

import requests

WEB = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "gateway", "web")


def test_service_routes(gateway):
    h = requests.get(gateway.url + "/health").json()
    assert h["status"] == "ok" and h["context"] == 2048 and h["model"] == "strata-realvocab"
    assert h["images"] is False and h["api_key_required"] is False
    assert requests.get(gateway.url + "/status").json()["state"] == "idle"
    requests.post(gateway.url + "/v1/chat/completions",
                  json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    m = requests.get(gateway.url + "/metrics").json()
    assert m["requests"] >= 1 and m["completion_tokens"] >= 2 and m["recent"]
    assert m["engine_info"]["vocab"] == "248320"
    models = requests.get(gateway.url + "/v1/models").json()
    assert models["data"][0]["id"] == "strata-realvocab"
    assert requests.head(gateway.url + "/").status_code == 200
    page = requests.get(gateway.url + "/")
    assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
    if os.path.exists(os.path.join(WEB, "index.html")):
        for name in os.listdir(WEB):
            if os.path.isfile(os.path.join(WEB, name)):
                assert requests.get(gateway.url + "/web/" + name).status_code == 200
    assert requests.get(gateway.url + "/web/../app.py").status_code == 404
    assert requests.get(gateway.url + "/web/%2e%2e/app.py").status_code == 404
    r = requests.get(gateway.url + "/v1/nothing")
    assert r.status_code == 404 and "error" in r.json()


def test_api_key(start_gateway):
    g = start_gateway("--api-key", "k1")
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    assert requests.post(g.url + "/v1/chat/completions", json=body).status_code == 401
    assert requests.post(g.url + "/v1/chat/completions", json=body,
                         headers={"Authorization": "Bearer k2"}).status_code == 401
    assert requests.post(g.url + "/v1/chat/completions", json=body,
                         headers={"Authorization": "Bearer k1"}).status_code == 200
    assert requests.post(g.url + "/v1/chat/completions", json=body, headers={"x-api-key": "k1"}).status_code == 200
    assert requests.get(g.url + "/metrics").status_code == 401
    assert requests.get(g.url + "/health").json()["api_key_required"] is True
    assert requests.get(g.url + "/").status_code == 200  # the page itself is open; its API calls need the key
