# The chat page in headless Chromium (Debian's, driven by Playwright) against the real gateway on the real
# engine with the tiny model: an answer streams in, stop lands mid-answer, the next message is answered, chats
# survive a reload, the monitor shows the requests; screenshots go to tests/artifacts/. The tiny model stays here for
# its long answers (seconds of streaming); the demo model's short real answers are in test_chat_page_demo_model.py.
import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from e2e_helpers import TEST_MODEL_CONFIG, Gateway, get_json, open_page, wait_until


@pytest.fixture
def page(gateway):
    with open_page(gateway.url) as page:
        yield page


def text_length(page: Page, selector: str) -> int:
    return page.evaluate(f"() => (document.querySelector({json.dumps(selector)})?.textContent || '').length")


def test_answer_streams_stop_lands_mid_answer_and_next_message_is_answered(page, gateway, artifacts_dir):
    cancels_before = gateway.log_path.read_text().count(", cancel")
    expect(page.locator("#model-name")).to_have_text(gateway.health["model"])
    expect(page.locator("#attach")).to_be_hidden()        # the server says images are off
    # First message with thinking on: the reasoning streams into the open thinking box, which folds when the
    # answer starts; stop is pressed while the answer is still streaming.
    page.select_option("#thinking-level", "high")
    page.fill("#prompt", "Tell me a long story about a lighthouse.")
    page.press("#prompt", "Enter")
    thinking = ".message.assistant .thinking-body"
    answer = ".message.assistant .body"
    page.wait_for_function(f"() => (document.querySelector('{thinking}')?.textContent || '').length > 10 "
                           f"&& document.querySelector('{answer}').textContent === ''")
    assert page.locator(".message.assistant details.thinking").get_attribute("open") is not None
    expect(page.locator(".message.assistant summary")).to_have_text("Thinking ...")
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator("#send")).to_be_hidden()
    page.screenshot(path=str(artifacts_dir / "chat_page_thinking.png"))

    page.wait_for_function(f"() => document.querySelector('{answer}').textContent.length > 20", timeout=30_000)
    first_length = text_length(page, answer)
    page.wait_for_function(f"() => document.querySelector('{answer}').textContent.length > {first_length}")
    assert page.locator(".message.assistant details.thinking").get_attribute("open") is None   # folded
    expect(page.locator(".message.assistant summary")).to_contain_text("Thought (")
    page.screenshot(path=str(artifacts_dir / "chat_page_streaming.png"))

    page.click("#stop")
    expect(page.locator(".message.assistant .stats").first).to_contain_text("stopped")
    expect(page.locator("#send")).to_be_visible()
    gateway.wait_idle()
    wait_until(lambda: gateway.log_path.read_text().count(", cancel") == cancels_before + 1, 10,
               "the engine's log line for the cancelled request")

    # Second message: no thinking, at most 40 tokens (set in the settings panel), answered to the end.
    page.select_option("#thinking-level", "none")
    page.click("#toggle-settings")
    page.fill("#s-max_tokens", "40")
    page.click("#settings-close")
    page.fill("#prompt", "And a short one?")
    page.press("#prompt", "Enter")
    # (Where the first answer was stopped changes this prompt, so the random model may end before 40 tokens.)
    second = page.locator(".message.assistant").nth(1)
    stats = second.locator(".stats")
    expect(stats).to_contain_text(re.compile(r"^\d+ tokens · [\d.]+ tok/s"), timeout=30_000)
    expect(stats).not_to_contain_text("stopped")
    tokens = int(stats.inner_text().split(" tokens")[0])
    assert 1 <= tokens <= 40
    assert len(second.locator(".body").inner_text()) > 0
    assert second.locator("details.thinking").count() == 0
    wait_until(lambda: any(r["completion_tokens"] == tokens and r["finish_reason"] in ("stop", "length")
                           for r in get_json(f"{gateway.url}/metrics")["recent"]), 10, "the answer in /metrics")
    page.screenshot(path=str(artifacts_dir / "chat_page.png"))

    # The chat is kept in the browser across a reload.
    page.reload()
    expect(page.locator(".chat-item")).to_have_count(1)
    expect(page.locator(".message")).to_have_count(4)
    expect(page.locator(".chat-title")).to_have_text("Tell me a long story about a lighthouse.")

    # The monitor view shows the state and the finished request.
    page.click("#show-monitor")
    expect(page.locator("#m-state")).to_have_text("idle")
    expect(page.locator("#m-requests tbody tr").first).to_contain_text(str(tokens))
    page.screenshot(path=str(artifacts_dir / "chat_page_monitor.png"))
    page.click("#back-to-chat")
    page.click("#new-chat")
    expect(page.locator(".chat-item")).to_have_count(2)


def test_stored_markdown_is_escaped_and_code_blocks_copy(page, gateway):
    chat = {"id": "c1", "title": "markdown", "created": 0, "messages": [
        {"role": "user", "content": "<img src=x onerror=alert(1)>"},
        {"role": "assistant", "content": "Run this:\n\n```python\nprint('<b>hi</b>')\n```\n\n<script>window.hacked=1"
                                         "</script> **done**"}]}
    page.evaluate(f"localStorage.setItem('strata.chats.v1', {json.dumps(json.dumps([chat]))})")
    page.reload()
    expect(page.locator(".code-block code")).to_have_text("print('<b>hi</b>')")
    assert page.locator(".message script, .message img, .message b").count() == 0
    assert page.evaluate("() => window.hacked === undefined")
    expect(page.locator(".message.assistant strong")).to_have_text("done")
    page.click(".copy-code")
    expect(page.locator(".copy-code")).to_have_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == "print('<b>hi</b>')"


def test_page_asks_for_the_api_key_when_the_server_needs_one(engine_bin, tiny_models, artifacts_dir):
    server = Gateway(Path(tiny_models(TEST_MODEL_CONFIG)["gguf"]["f32"]), Path(engine_bin),
                     artifacts_dir / "e2e-gateway-key.log", "--api-key", "sk-page-test")
    try:
        with open_page(server.url) as page:
            expect(page.locator("#banner")).to_contain_text("needs an API key")
            page.select_option("#thinking-level", "none")
            page.fill("#prompt", "Hello?")
            page.press("#prompt", "Enter")
            expect(page.locator(".message.assistant .error")).to_contain_text("set the API key in Settings")
            page.click("#toggle-settings")
            page.fill("#s-api-key", "sk-page-test")
            page.fill("#s-max_tokens", "8")
            page.click("#settings-close")
            expect(page.locator("#banner")).to_be_hidden()
            page.fill("#prompt", "Hello again?")
            page.press("#prompt", "Enter")
            answer = page.locator(".message.assistant").last
            expect(answer.locator(".stats")).to_contain_text(re.compile(r"^[1-8] tokens"), timeout=30_000)
            assert answer.locator(".error").count() == 0
    finally:
        server.close()
