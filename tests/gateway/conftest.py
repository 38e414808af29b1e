"""Gateway test fixtures: the tiny real-vocabulary model, its tokenizer, and a real gateway (with the real engine
binary) started on a free port. The engine binary and tiny-model builders are in tests/conftest.py."""
from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_harness import Gateway  # noqa: E402


@pytest.fixture(scope="session")
def realvocab_gguf(tiny_models) -> str:
    return tiny_models("realvocab")["gguf"]["q8_0"]


@pytest.fixture(scope="session")
def realvocab_meta(realvocab_gguf):
    from gateway.text.gguf_meta import read_gguf_meta
    return read_gguf_meta(realvocab_gguf)


@pytest.fixture(scope="session")
def tokenizer(realvocab_gguf, realvocab_meta):
    from gateway.text.tokenizer import load_tokenizer
    return load_tokenizer(realvocab_gguf, realvocab_meta)


@pytest.fixture(scope="module")
def gateway(realvocab_gguf, engine_bin):
    g = Gateway(realvocab_gguf, engine_bin)
    yield g
    g.stop()


@pytest.fixture
def start_gateway(realvocab_gguf, engine_bin):
    """start_gateway(*extra_args, ctx=...) -> Gateway, stopped after the test."""
    started = []

    def start(*extra: str, ctx: int = 2048) -> Gateway:
        g = Gateway(realvocab_gguf, engine_bin, *extra, ctx=ctx)
        started.append(g)
        return g
    yield start
    for g in started:
        g.stop()


@pytest.fixture(scope="module")
def oai(gateway):
    """The official openai SDK on the module's gateway."""
    import openai
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def claude(gateway):
    """The official anthropic SDK on the module's gateway."""
    import anthropic
    return anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0, timeout=60)
