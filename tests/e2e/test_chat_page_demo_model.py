# The chat page in headless Chromium against the real gateway on the shipped demo model (installer/demo): a held-out
# arithmetic question is answered right with a thinking block that streams open and then folds, a second turn is
# answered, stop lands mid-answer; screenshots go to tests/artifacts/. Expected answers are computed, not copied
# from the model (engine/tools/demo_model/facts.py holds the prompts and fixed replies it was trained on).
import re
import subprocess

from playwright.sync_api import Page, expect

from e2e_helpers import open_page, wait_until
import strata_testing  # noqa: F401  (puts engine/tools on sys.path for demo_model)
from demo_model import data, facts  # noqa: E402
from demo_model import tokenizer as demo_tokenizer  # noqa: E402
from e2e_helpers import DEMO_MODEL  # noqa: E402

# "What is 7 * 8?": a product held out by its phrasing (model card: the table products are right).
PRODUCT = ("*", 7, 8, 0)
assert data.is_held_out(PRODUCT), f"{PRODUCT} is a training case; pick a held-out one"


def chat_reply(prompt: str) -> str:
    """The fixed reply the demo model learned for a small-talk prompt."""
    return next(reply for prompts, reply, _ in facts.CHAT if prompt in prompts)


def engine_reply(engine_bin: str, messages: list, effort: str) -> str:
    """The shipped model's greedy reply to messages, from `strata generate` on the conversation rendered as the
    gateway renders it (the trained chat template)."""
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    prompt = data.render(messages, None, effort, add_generation_prompt=True)
    ids = tokenizer.encode(prompt, add_special_tokens=False).ids
    r = subprocess.run([engine_bin, "generate", "--model", str(DEMO_MODEL), "--prompt-ids", ",".join(map(str, ids)),
                        "-n", "80"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"strata generate failed ({r.returncode}): {r.stderr[-2000:]}"
    out = [int(t) for t in r.stdout.strip().splitlines()[0].split(",") if t]
    im_end = tokenizer.token_to_id("<|im_end|>")
    return tokenizer.decode(out[:out.index(im_end)] if im_end in out else out).strip()


# Records, from inside the page, whether the first answer's thinking block was ever open while it streamed.
WATCH_THINKING = """() => {
  window.sawOpenThinking = false;
  new MutationObserver(() => {
    const details = document.querySelector('.message.assistant details.thinking');
    if (details && details.open && details.querySelector('summary').textContent === 'Thinking ...') {
      window.sawOpenThinking = true;
    }
  }).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
}"""

# Presses stop from inside the page as soon as the answer's first text shows (not the waiting placeholder): the demo model's answers last a
# fraction of a second, too short for a click sent from the test process to land mid-answer.
STOP_AT_FIRST_TEXT = """() => {
  window.stoppedAt = null;
  const observer = new MutationObserver(() => {
    const body = document.querySelector('.message.assistant:last-child .body');
    if (body && body.textContent.length > 0 && !body.querySelector('.typing')
        && !document.getElementById('stop').hidden) {
      window.stoppedAt = body.textContent;
      observer.disconnect();
      document.getElementById('stop').click();
    }
  });
  observer.observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
}"""


def ask(page: Page, text: str, thinking: str, nth: int):
    """Sends text at a thinking level; returns the nth assistant message once its answer has ended."""
    page.select_option("#thinking-level", thinking)
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")
    message = page.locator(".message.assistant").nth(nth)
    expect(message.locator(".stats")).to_contain_text(re.compile(r"\d+ tokens"), timeout=30_000)
    expect(page.locator("#send")).to_be_visible()
    return message


def stop_at_first_answer_text(page: Page, prompt: str) -> str:
    """Sends prompt (thinking off) in a new chat with stop armed for the first answer text; returns what shows."""
    page.click("#new-chat")
    page.evaluate(STOP_AT_FIRST_TEXT)
    page.select_option("#thinking-level", "none")
    page.fill("#prompt", prompt)
    page.press("#prompt", "Enter")
    stopped = page.locator(".message.assistant").last
    expect(stopped.locator(".stats")).to_contain_text("stopped", timeout=30_000)
    expect(page.locator("#send")).to_be_visible()
    assert page.evaluate("() => window.stoppedAt"), "stop was never pressed"
    return stopped.locator(".body").inner_text().strip()


def test_demo_model_answers_thinks_takes_a_second_turn_and_stops(demo_gateway, engine_bin, artifacts_dir):
    op, a, b, phrasing = PRODUCT
    question = facts.ARITHMETIC_PROMPTS[phrasing].format(a=a, op=op, b=b, word=facts.OP_WORDS[op])
    with open_page(demo_gateway.url) as page:
        expect(page.locator("#model-name")).to_have_text("strata-demo")
        assert demo_gateway.health["model"] == "strata-demo"

        # 1. Thinking on: the reasoning streams into an open block, the answer folds it, the answer is a * b.
        page.evaluate(WATCH_THINKING)
        first = ask(page, question, "medium", 0)
        answer = first.locator(".body").inner_text()
        assert re.findall(r"\d+", answer)[-1:] == [str(a * b)], f"{question!r} answered {answer!r}"
        expect(first.locator("details.thinking")).to_have_count(1)
        assert first.locator("details.thinking").get_attribute("open") is None     # folded once the answer came
        expect(first.locator("summary")).to_have_text(re.compile(r"^Thought \(\d+ words\)$"))
        reasoning = first.locator(".thinking-body").text_content()
        assert reasoning.strip() and "think>" not in reasoning + answer, (reasoning, answer)
        assert page.evaluate("() => window.sawOpenThinking"), "the thinking block was never open while streaming"
        expect(first.locator(".stats")).not_to_contain_text("stopped")

        # 2. A second turn, thinking off: the model's reply to the whole conversation, no thinking block. The demo
        # model was trained on one user turn per conversation, so its reply to a second one is not a trained
        # answer (v3 repeats its first answer); the expectation is the engine's own greedy reply to the same
        # conversation, which needs the page to send the first turn (with its reasoning) as history.
        second_prompt = "What is your name?"
        second = ask(page, second_prompt, "none", 1)
        history = [{"role": "user", "content": question},
                   {"role": "assistant", "content": answer, "reasoning_content": reasoning},
                   {"role": "user", "content": second_prompt}]
        assert second.locator(".body").inner_text().strip() == engine_reply(engine_bin, history, "none")
        expect(second.locator("details.thinking")).to_have_count(0)
        expect(page.locator(".message")).to_have_count(4)
        first.locator("summary").click()                # the user opens the folded thinking for the screenshot
        expect(first.locator(".thinking-body")).to_be_visible()
        page.screenshot(path=str(artifacts_dir / "chat_page_demo_model.png"))

        # 3. Stop mid-answer in a new chat: the answer ends early, marked stopped, and the engine cancels.
        stop_prompt = "What can you do?"
        full_reply = chat_reply(stop_prompt)
        for attempt in range(3):
            cancels_before = demo_gateway.log_path.read_text().count(", cancel")
            shown = stop_at_first_answer_text(page, stop_prompt)
            assert shown and full_reply.startswith(shown), (shown, full_reply)
            if len(shown) < len(full_reply):
                break
            demo_gateway.wait_idle()     # the whole answer came in one read (a starved browser): again
        assert len(shown) < len(full_reply), f"stop never landed mid-answer in {attempt + 1} tries"
        demo_gateway.wait_idle()
        wait_until(lambda: demo_gateway.log_path.read_text().count(", cancel") == cancels_before + 1, 10,
                   "the engine's log line for the cancelled request")
        page.screenshot(path=str(artifacts_dir / "chat_page_demo_model_stopped.png"))
