# Pictures through the chat page in headless Chromium: the real gateway with a tiny random vision tower
# (tests/gateway/vision_fixture.py) served by the real strata-vision helper, on the real engine with the tiny
# real-vocabulary model. The Picture button shows because /health says images are on; a picture chosen in the file
# dialog becomes a chip, is sent with the message, shown in it, and reaches the engine as image rows (its prompt is
# longer than the same text alone); a broken picture gets the gateway's 400 shown in the chat, that turn stays on
# screen but is left out of later requests (else every next message would be refused too), so the next message is
# answered; the chip's remove button drops a picture before sending.
import io
import re
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from e2e_helpers import Gateway, get_json, open_page, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))
import vision_fixture as vf  # noqa: E402


def write_png(path: Path, width: int, height: int) -> Path:
    from PIL import Image
    image = Image.new("RGB", (width, height))
    image.putdata([((x * 7) % 256, (y * 11) % 256, ((x + y) * 5) % 256) for y in range(height) for x in range(width)])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture(scope="module")
def vision_gateway(engine_bin, tiny_models, artifacts_dir, tmp_path_factory):
    tower = vf.make_tower(tmp_path_factory.mktemp("tower"))
    helper = vf.helper_path()
    assert Path(helper).exists(), f"{helper} is missing: build the engine first"
    model = Path(tiny_models("realvocab")["gguf"]["q8_0"])
    server = Gateway(model, Path(engine_bin), artifacts_dir / "e2e-vision-gateway.log", "--vision-model",
                     tower["gguf"], "--vision-helper", helper, "--vision-tmp",
                     str(tmp_path_factory.mktemp("vision-tmp")), context=4096)
    wait_until(lambda: get_json(f"{server.url}/health")["vision"]["state"] == "ready", 60,
               "the vision helper to be ready")
    yield server
    server.close()


def engine_prompts(gateway: Gateway, at_least: int) -> list[int]:
    """The prompt lengths the engine logged (`serve: request: prompt N`), once there are at least `at_least`."""
    pattern = re.compile(r"serve: request: prompt (\d+)")

    def counts():
        found = [int(v) for v in pattern.findall(gateway.log_path.read_text())]
        return (found,) if len(found) >= at_least else None
    return wait_until(counts, 15, f"{at_least} engine request lines")[0]


def short_answers(page) -> None:
    """Thinking off and at most 16 tokens an answer (the settings panel): the random tiny model rambles."""
    page.select_option("#thinking-level", "none")
    page.click("#toggle-settings")
    page.fill("#s-max_tokens", "16")
    page.click("#settings-close")


def send(page, text: str) -> None:
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")
    expect(page.locator("#send")).to_be_visible(timeout=60_000)   # the answer has ended


def test_picture_is_sent_shown_and_reaches_the_engine(vision_gateway, artifacts_dir, tmp_path):
    picture = write_png(tmp_path / "lighthouse.png", 96, 64)
    with open_page(vision_gateway.url) as page:
        expect(page.locator("#attach")).to_be_visible()
        short_answers(page)
        before = len(engine_prompts(vision_gateway, 0))
        page.set_input_files("#file-input", str(picture))
        expect(page.locator("#attachments .attachment")).to_have_count(1)
        send(page, "What is in this picture?")
        user = page.locator(".message.user").last
        expect(user.locator("img")).to_have_count(1)
        assert user.locator("img").get_attribute("src").startswith("data:image/png;base64,")
        expect(page.locator("#attachments .attachment")).to_have_count(0)   # sent, so no longer pending
        expect(page.locator(".message.assistant .stats").last).to_be_visible()
        assert page.locator(".message.assistant .error").count() == 0
        page.screenshot(path=str(artifacts_dir / "chat_page_picture.png"))
        with_picture = engine_prompts(vision_gateway, before + 1)[before]

        # The same words in a new chat, without a picture: the engine's prompt is shorter by the image's rows.
        page.click("#new-chat")
        send(page, "What is in this picture?")
        text_only = engine_prompts(vision_gateway, before + 2)[before + 1]
        assert with_picture > text_only + 2, (with_picture, text_only)


def test_broken_picture_gets_the_gateways_error_and_the_next_message_works(vision_gateway, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n this is not a picture")
    good = write_png(tmp_path / "small.png", 40, 40)
    with open_page(vision_gateway.url) as page:
        short_answers(page)
        page.set_input_files("#file-input", str(broken))
        send(page, "Look at this.")
        error = page.locator(".message.assistant .error").last
        expect(error).to_be_visible()
        assert "not a picture" in error.text_content() and "not sent" in error.text_content(), error.text_content()
        # A picture chosen and removed again is not sent; the next message is answered.
        page.set_input_files("#file-input", str(good))
        expect(page.locator("#attachments .attachment")).to_have_count(1)
        page.locator("#attachments .attachment button").click()
        expect(page.locator("#attachments .attachment")).to_have_count(0)
        send(page, "Say something.")
        expect(page.locator(".message.user").last.locator("img")).to_have_count(0)
        last = page.locator(".message.assistant").last
        expect(last.locator(".stats")).to_be_visible()
        assert last.locator(".error").count() == 0
