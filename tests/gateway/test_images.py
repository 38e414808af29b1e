"""Images through the real gateway: a tiny random vision tower (vision_fixture.py) served by the real strata-vision,
the real engine with --vision and the tiny real-vocabulary model (hidden size 32 = the tower's out_hidden_size).

- The gateway's picture path (Pillow decode, EXIF orientation, transparency on white, smart_resize, BICUBIC, PPM)
  gives the pixel_values transformers' own image processor gives for the original picture, and the one embeddings
  file it writes for several pictures holds transformers' pooler_output rows for each, in order (vision/README.md:
  within 1e-4 relative; it measured 6.9e-7..9.2e-7).
- Round trips with the official openai / anthropic SDKs: data: URLs, http URLs, base64 blocks, local files (absolute
  paths and file:// URLs, only on a server that listens on this PC only), two pictures in one
  prompt, a follow-up that reuses the picture; prompt tokens count the image tokens (the engine's own prompt count
  equals usage, so it took exactly that many image rows), count_tokens too, the too-long 400 counts them.
- The 400s (undecodable bytes, bad base64, unsupported URL schemes, fetch failures, too large, sizes the resize rule
  refuses, a system message with a picture, a gateway without vision), each followed by a request that works; a
  dead helper gives that request a 503 and the next request works; the request's files are removed afterwards.

Tests that need the engine's GENI skip (with that reason) only when `strata --serve --vision` does not say
INFO vision=1."""
from __future__ import annotations

import base64
import http.server
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision_fixture as vf  # noqa: E402
from gateway_harness import Gateway, free_port  # noqa: E402

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

CHAT = "/v1/chat/completions"
ROW_TOL = 1e-4           # vision/README.md's tolerance for rows against transformers
MAX_IMAGE_MB = 0.5


# ---- pictures ---------------------------------------------------------------------------------------------------

def picture(w, h, mode="RGB", seed=0) -> Image.Image:
    rng = np.random.default_rng(seed)
    if mode == "P":
        img = Image.fromarray(rng.integers(0, 16, size=(h, w), dtype=np.uint8), "L").convert("P")
        img.putpalette([int(v) for v in rng.integers(0, 256, size=768)])
        img.info["transparency"] = 3
        return img
    bands = len(Image.new(mode, (1, 1)).getbands())
    arr = rng.integers(0, 256, size=(h, w, bands) if bands > 1 else (h, w), dtype=np.uint8)
    return Image.fromarray(arr, mode)


def encoded(img: Image.Image, fmt="PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def data_url(data: bytes, mime="image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def png_url(w, h, seed=0) -> str:
    return data_url(encoded(picture(w, h, seed=seed)))


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def chat(url, content, max_tokens=4, **extra):
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "reasoning_effort": "none", **extra}
    return requests.post(url + CHAT, json=body, timeout=120)


# ---- fixtures ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tower(tmp_path_factory):
    return vf.make_tower(tmp_path_factory.mktemp("tower"))


@pytest.fixture(scope="module")
def helper_bin():
    path = vf.helper_path()
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: build it first (cmake -S . -B build && cmake --build build)")
    return path


@pytest.fixture(scope="module")
def engine_reads_images(engine_bin, realvocab_gguf) -> bool:
    r = subprocess.run([engine_bin, "--serve", "--model", realvocab_gguf, "--vision", "--ctx", "256"],
                       input="QUIT\n", capture_output=True, text=True, timeout=120)
    return "INFO vision=1" in r.stdout.splitlines()


class PictureServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


@pytest.fixture(scope="module")
def pic_server():
    """http://127.0.0.1:PORT/: /pic.png (a 96x64 PNG), /big.png (more than the size limit), /slow.png (answers after
    5 s), anything else 404."""
    files = {"/pic.png": encoded(picture(96, 64, seed=21)), "/big.png": bytes(int(MAX_IMAGE_MB * 1024 * 1024) + 4096)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/slow.png":
                time.sleep(5)
            body = files.get(self.path, files["/pic.png"] if self.path == "/slow.png" else None)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            if self.path != "/big.png":          # the big one has no length: the limit must apply while reading
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    server = PictureServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def vgw(tower, helper_bin, engine_bin, realvocab_gguf, engine_reads_images, tmp_path_factory):
    if not engine_reads_images:
        pytest.skip(f"{engine_bin} --serve --vision does not say INFO vision=1: this engine build has no GENI")
    tmp = tmp_path_factory.mktemp("vision-tmp")
    g = Gateway(realvocab_gguf, engine_bin, "--vision-model", tower["gguf"], "--vision-helper", helper_bin,
                "--vision-tmp", str(tmp), "--image-max-mb", str(MAX_IMAGE_MB), "--image-fetch-timeout", "2")
    g.tmp = tmp
    wait_helper(g)
    yield g
    g.stop()


def health(g) -> dict:
    return requests.get(g.url + "/health", timeout=10).json()


def wait_helper(g, not_pid=None, timeout=30) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = health(g)["vision"]
        if v["state"] == "ready" and v["pid"] and v["pid"] != not_pid:
            return v
        time.sleep(0.1)
    raise AssertionError(f"the vision helper is not ready: {health(g)}")


def engine_prompt_counts(g, at_least: int = 0) -> list[int]:
    """The prompt lengths the engine itself logged per request (`serve: request: prompt N`); waits a little for
    at_least of them (the engine's stderr reaches the gateway's log a moment after the answer)."""
    deadline = time.time() + 10
    while True:
        counts = [int(n) for n in re.findall(r"serve: request: prompt (\d+)", g.read_log())]
        if len(counts) >= at_least or time.time() > deadline:
            return counts


# ---- the picture path against transformers -------------------------------------------------------------------------

def test_rule_from_the_helper(tower, helper_bin):
    from gateway.vision.helper import helper_info, rule_of
    from gateway.vision.images import ResizeRule
    info = helper_info(helper_bin, tower["gguf"])
    assert rule_of(info, None) == ResizeRule(32, vf.MIN_PIXELS, vf.MAX_PIXELS)
    assert rule_of(info, 40000) == ResizeRule(32, vf.MIN_PIXELS, 40000)
    big = dict(info, max_pixels=str(16 * 1024 * 1024))     # a checkpoint allowing 16 M pixels is kept modest
    assert rule_of(big, None).max_pixels == 28 * 28 * 1280


def test_smart_resize_equals_transformers():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

    from gateway.vision.images import smart_resize
    for h, w in [(75, 100), (20, 30), (300, 301), (1000, 40), (33, 31), (480, 640), (5000, 4000), (1, 1), (16, 3000)]:
        for mn, mx in [(56 * 56, 28 * 28 * 1280), (32 * 32, 256 * 256), (65536, 16777216)]:
            assert smart_resize(h, w, 32, mn, mx) == hf_smart_resize(h, w, 32, mn, mx), (h, w, mn, mx)


PIXEL_CASES = [((100, 75), "RGB", "PNG"), ((150, 41), "RGBA", "PNG"), ((200, 300), "RGB", "PNG"),
               ((30, 20), "L", "PNG"), ((40, 1000), "RGB", "PNG"), ((31, 33), "LA", "PNG"), ((70, 50), "P", "PNG"),
               ((640, 480), "RGB", "JPEG"), ((90, 60), "RGB", "GIF"), ((64, 64), "RGB", "WEBP"),
               ((77, 55), "RGB", "BMP"), ((45, 65), "RGBA", "TIFF")]


@pytest.mark.parametrize("size,mode,fmt", PIXEL_CASES, ids=[f"{s[0]}x{s[1]}-{m}-{f}" for s, m, f in PIXEL_CASES])
def test_pixels_equal_transformers_processor(tower, size, mode, fmt):
    """The gateway's PPM, put through transformers' image processor (which then has nothing left to resize), gives
    the pixel_values the processor gives for the original picture (resized by the processor itself)."""
    from transformers import AutoImageProcessor

    from gateway.vision.images import ResizeRule, prepare
    proc = AutoImageProcessor.from_pretrained(tower["hf"])
    pic = picture(*size, mode=mode, seed=hash(size) % 1000)
    data = encoded(pic.convert("RGB") if fmt == "JPEG" else pic, fmt)
    rule = ResizeRule(32, vf.MIN_PIXELS, vf.MAX_PIXELS)
    p = prepare(data, "test", rule)
    ours = Image.open(io.BytesIO(p.ppm))
    assert ours.mode == "RGB" and ours.size == (p.width, p.height) and p.width % 32 == 0 and p.height % 32 == 0
    assert (p.nx, p.ny) == (p.width // 32, p.height // 32) and vf.MIN_PIXELS <= p.width * p.height <= vf.MAX_PIXELS
    ref = proc(images=[Image.open(io.BytesIO(data))], return_tensors="np")
    mine = proc(images=[ours], return_tensors="np")
    assert mine["image_grid_thw"].tolist() == ref["image_grid_thw"].tolist() == [[1, p.height // 16, p.width // 16]]
    diff = float(np.abs(mine["pixel_values"] - ref["pixel_values"]).max())
    print(f"{size} {mode} {fmt} -> {p.width}x{p.height}: max |pixel diff| {diff:.1e}")
    assert diff <= 1e-6


def test_exif_orientation_applied(tower):
    from transformers import AutoImageProcessor

    from gateway.vision.images import ResizeRule, prepare
    from PIL import ImageOps
    pic = picture(96, 64, seed=4)                        # stored 96 wide; orientation 6 shows it 64 wide, 96 tall
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encoded(pic, "JPEG", exif=exif, quality=95)
    p = prepare(data, "test", ResizeRule(32, vf.MIN_PIXELS, vf.MAX_PIXELS))
    assert (p.width, p.height, p.nx, p.ny) == (64, 96, 2, 3)
    proc = AutoImageProcessor.from_pretrained(tower["hf"])
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    ref = proc(images=[upright], return_tensors="np")["pixel_values"]
    mine = proc(images=[Image.open(io.BytesIO(p.ppm))], return_tensors="np")["pixel_values"]
    assert float(np.abs(mine - ref).max()) <= 1e-6


def read_sve_images(path: str) -> list[tuple[int, int, np.ndarray]]:
    import struct
    data = open(path, "rb").read()
    out, off = [], 0
    while off < len(data):
        assert data[off:off + 4] == b"SVE1"
        n, nx, ny, n_embd = struct.unpack("<4i", data[off + 4:off + 20])
        rows = np.frombuffer(data, dtype="<f4", count=n * n_embd, offset=off + 20).reshape(n, n_embd)
        out.append((nx, ny, rows))
        off += 20 + 4 * n * n_embd
    return out


def test_embeddings_file_holds_transformers_rows_in_order(tower, helper_bin, tmp_path):
    """VisionService (the gateway's code, in this process) with the real helper: three pictures of one request give
    one file of three SVE1 images in prompt order, each equal to transformers' rows for the original picture; the
    same picture again is taken from the cache (same bytes, no second ENC)."""
    import asyncio

    from transformers import AutoImageProcessor

    from gateway.vision.helper import VisionHelper
    from gateway.vision.images import ResizeRule
    from gateway.vision.service import VisionService
    pics = [picture(100, 75, seed=1), picture(150, 41, "RGBA", seed=2), picture(200, 300, seed=3)]
    messages = [{"role": "user", "content": [image_part(data_url(encoded(pics[0]))), {"type": "text", "text": "a"}]},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                          "data": base64.b64encode(encoded(pics[1])).decode()}},
                                             image_part(data_url(encoded(pics[2])))]}]

    async def run():
        helper = VisionHelper([helper_bin, "--model", tower["gguf"], "--threads", "1"])
        service = VisionService(helper, ResizeRule(32, vf.MIN_PIXELS, vf.MAX_PIXELS), 32, str(tmp_path))
        try:
            images = await service.load(messages)
            folder = service.new_request_dir()
            path = await service.embeddings_file(images, folder)
            got = read_sve_images(path)
            again = await service.embeddings_file(images, folder)
            same = open(again, "rb").read() == open(path, "rb").read()
            service.remove(folder)
            return images, got, same, service.encoded, service.cache_hits
        finally:
            await helper.close()

    images, got, same, encoded_n, hits = asyncio.run(run())
    assert same and encoded_n == 3 and hits == 3
    assert os.listdir(tmp_path) == []
    proc = AutoImageProcessor.from_pretrained(tower["hf"])
    assert len(got) == 3
    for pic, img, (nx, ny, rows) in zip(pics, images, got):
        inputs = proc(images=[pic], return_tensors="pt")
        with torch.no_grad():
            ref = tower["model"](inputs["pixel_values"], grid_thw=inputs["image_grid_thw"]).pooler_output.numpy()
        assert (nx, ny) == (img.nx, img.ny) and rows.shape == ref.shape
        d = float(np.abs(rows - ref).max() / np.abs(ref).max())
        print(f"{pic.size} {pic.mode} -> {nx}x{ny}: max rel diff {d:.2e}")
        assert d < ROW_TOL


# ---- a gateway without vision -------------------------------------------------------------------------------------

def test_no_vision_gateway_refuses_images(gateway):
    h = requests.get(gateway.url + "/health").json()
    assert h["images"] is False and "vision" not in h
    r = chat(gateway.url, [image_part(png_url(64, 64)), {"type": "text", "text": "what is it"}])
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and "started without image support" in err["message"]
    r = requests.post(gateway.url + "/v1/messages", json={
        "model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(encoded(picture(32, 32))).decode()}}]}]})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert chat(gateway.url, "Hello").status_code == 200


# ---- the vision gateway ---------------------------------------------------------------------------------------------

def test_health_and_models_say_images(vgw, tower):
    h = health(vgw)
    assert h["images"] is True and h["status"] == "ok"
    assert h["vision"]["state"] == "ready" and h["vision"]["model"] == tower["gguf"]
    assert (h["vision"]["factor"], h["vision"]["min_pixels"], h["vision"]["max_pixels"]) == (32, 1024, 65536)
    m = requests.get(vgw.url + "/v1/models").json()["data"][0]
    assert m["images"] is True and "image" in m["input_modalities"]
    assert "--vision" in vgw.read_log().split("starting engine:")[1].splitlines()[0]


def test_openai_round_trip(vgw):
    import openai
    oai = openai.OpenAI(base_url=vgw.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    text = {"type": "text", "text": "What is in this picture?"}

    def ask(content):
        r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": content}], max_tokens=5,
                                        reasoning_effort="none")
        assert r.choices[0].finish_reason in ("length", "stop")
        assert r.choices[0].message.content, r
        return r.usage.prompt_tokens

    seen = len(engine_prompt_counts(vgw))
    base = ask([text])
    one = ask([image_part(png_url(64, 96, seed=10)), text])             # 2 x 3 merged grid: 6 image tokens
    wide = ask([image_part(png_url(160, 96, seed=11)), text])           # 5 x 3: 15
    two = ask([image_part(png_url(64, 96, seed=12)), text, image_part(png_url(160, 96, seed=13))])
    assert one == base + 2 + 6 and wide == base + 2 + 15 and two == base + 4 + 6 + 15
    # The engine read exactly those prompts: its own prompt count equals usage, so each <|image_pad|> run had the
    # file's number of rows (it answers ERR otherwise).
    assert engine_prompt_counts(vgw, seen + 4)[seen:] == [base, one, wide, two]
    log = vgw.read_log()
    assert "GENI: 1 picture(s), rows 2x3=6" in log and "GENI: 2 picture(s), rows 2x3=6+5x3=15" in log
    assert os.listdir(vgw.tmp) == []                                    # the request's files are gone


def test_responses_input_image(vgw):
    """A Responses input_image is the same picture as a chat image_url part: the same prompt, image tokens counted."""
    url, text = png_url(64, 96, seed=10), "What is in this picture?"
    for stream in (False, True):
        r = requests.post(vgw.url + "/v1/responses", json={
            "model": "m", "max_output_tokens": 3, "reasoning": {"effort": "none"}, "stream": stream, "input": [
                {"role": "user", "content": [{"type": "input_image", "image_url": url},
                                             {"type": "input_text", "text": text}]}]}, timeout=120)
        assert r.status_code == 200, r.text
        if stream:
            events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
            assert events[-1]["type"] == "response.incomplete"
            usage = events[-1]["response"]["usage"]
        else:
            usage = r.json()["usage"]
        with_picture = chat(vgw.url, [image_part(url), {"type": "text", "text": text}], max_tokens=3)
        assert usage["input_tokens"] == with_picture.json()["usage"]["prompt_tokens"]
        assert usage["input_tokens"] == chat(vgw.url, text).json()["usage"]["prompt_tokens"] + 2 + 6
    assert os.listdir(vgw.tmp) == []


def test_stream_http_url_and_follow_up_reuse(vgw, pic_server):
    import openai
    oai = openai.OpenAI(base_url=vgw.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    first = [{"role": "user", "content": [image_part(pic_server + "/pic.png"), {"type": "text", "text": "Describe"}]}]
    chunks = list(oai.chat.completions.create(model="m", messages=first, max_tokens=4, stream=True,
                                              reasoning_effort="none", stream_options={"include_usage": True}))
    answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert answer and chunks[-1].usage.prompt_tokens > 6
    before = health(vgw)["vision"]
    follow = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "And the colours?"}]
    r = oai.chat.completions.create(model="m", messages=follow, max_tokens=4, reasoning_effort="none")
    after = health(vgw)["vision"]
    assert after["encoded"] == before["encoded"] and after["cache_hits"] == before["cache_hits"] + 1
    assert r.usage.prompt_tokens_details.cached_tokens > 0                # the engine reused the same picture
    assert os.listdir(vgw.tmp) == []


def test_anthropic_round_trip_and_count_tokens(vgw):
    import anthropic
    claude = anthropic.Anthropic(base_url=vgw.url, api_key="unused", max_retries=0, timeout=60)
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(encoded(picture(96, 64, seed=30))).decode()}}
    text = {"type": "text", "text": "What is this?"}
    msgs = [{"role": "user", "content": [block, text]}]
    off = {"type": "disabled"}
    n = claude.messages.count_tokens(model="m", messages=msgs, thinking=off).input_tokens
    n_text = claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": [text]}],
                                          thinking=off).input_tokens
    assert n == n_text + 2 + 6                                           # 96 x 64: 3 x 2 merged grid
    r = claude.messages.create(model="m", max_tokens=5, messages=msgs, thinking=off)
    assert r.usage.input_tokens == n and r.content and r.content[0].type == "text"
    # a tool_result with a picture (an agent reading an image file)
    tool_msgs = [{"role": "user", "content": "Read the picture"},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                                                    "input": {"path": "a.png"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                               "content": [{"type": "text", "text": "a.png:"}, block]}]}]
    tools = [{"name": "Read", "description": "read a file", "input_schema": {"type": "object", "properties": {}}}]
    r = claude.messages.create(model="m", max_tokens=3, messages=tool_msgs, tools=tools, thinking=off)
    assert r.usage.input_tokens == claude.messages.count_tokens(model="m", messages=tool_msgs, tools=tools,
                                                                thinking=off).input_tokens
    assert "GENI: 1 picture(s), rows 3x2=6" in vgw.read_log()


def test_too_long_prompt_counts_image_tokens(vgw):
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(encoded(picture(256, 256, seed=40))).decode()}}

    def count(text, pic=None):
        content = [{"type": "text", "text": text}] + ([pic] if pic else [])
        r = requests.post(vgw.url + "/v1/messages/count_tokens", json={
            "model": "m", "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": content}]})
        assert r.status_code == 200, r.text
        return r.json()["input_tokens"]
    a, b = count("hello " * 100), count("hello " * 200)
    n = 100 + int((2040 - a) * 100 / (b - a))
    while count("hello " * n) > 2040:
        n -= 1
    text = ("hello " * n).rstrip()
    with_image = count(text, block)
    assert with_image == count(text) + 2 + 64 > 2048                     # 256 x 256: 8 x 8 image tokens
    assert chat(vgw.url, [{"type": "text", "text": text}], max_tokens=1).status_code == 200
    r = chat(vgw.url, [{"type": "text", "text": text}, image_part(data_url(encoded(picture(256, 256, seed=40))))],
             max_tokens=1)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and f"{with_image} prompt tokens" in err["message"], err
    assert "nothing was cut" in err["message"]


def _bad_cases(pic_server):
    closed = f"http://127.0.0.1:{free_port()}/x.png"
    png = encoded(picture(64, 64, seed=50))
    return [
        ("undecodable", image_part(data_url(b"this is not a picture at all")), "not a picture Pillow can read"),
        ("truncated", image_part(data_url(png[:80])), "cannot be decoded"),
        ("bad-base64", image_part("data:image/png;base64,@@@not*base64"), "not valid base64"),
        ("ftp", image_part("ftp://example.com/a.png"), "must be data: (base64), http(s) or file:// URLs"),
        ("file-missing", image_part("file:///nonexistent/strata-test.png"), "cannot read the local picture"),
        ("path-not-picture", image_part(os.path.abspath(__file__)), "not a picture Pillow can read"),
        ("file-other-host", image_part("file://elsewhere/a.png"), "must be data: (base64), http(s) or file://"),
        ("no-url", {"type": "image_url", "image_url": {}}, "needs image_url.url"),
        ("refused", image_part(closed), "cannot fetch"),
        ("404", image_part(pic_server + "/missing.png"), "HTTP 404"),
        ("fetched-too-large", image_part(pic_server + "/big.png"), "more than the limit"),
        ("slow", image_part(pic_server + "/slow.png"), "took more than 2 s"),
        ("base64-too-large", image_part(data_url(bytes(int(MAX_IMAGE_MB * 1024 * 1024) + 10))), "more than the limit"),
        ("aspect", image_part(png_url(500, 2)), "aspect ratio"),
        ("decoded-too-large", image_part(data_url(encoded(Image.new("1", (9000, 8000))))), "more than the 67,108,864"),
        ("rule-too-large", image_part(data_url(encoded(Image.new("RGB", (6000, 32), (9, 99, 199))))),
         "cannot be resized within"),
    ]


def test_bad_pictures_are_clear_400s(vgw, pic_server):
    for name, part, want in _bad_cases(pic_server):
        r = chat(vgw.url, [{"type": "text", "text": "look"}, part])
        assert r.status_code == 400, (name, r.status_code, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and want in err["message"], (name, err)
        assert err["param"].startswith("messages[0].content[1]"), (name, err)
        # nothing else is lost: the next picture and the next text work
        ok = chat(vgw.url, [image_part(png_url(64, 64, seed=51)), {"type": "text", "text": "look"}])
        assert ok.status_code == 200, (name, ok.text)
    assert chat(vgw.url, "Hello").status_code == 200
    r = requests.post(vgw.url + CHAT, json={"model": "m", "max_tokens": 3, "messages": [
        {"role": "system", "content": [image_part(png_url(64, 64))]}, {"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "system message cannot contain images" in r.json()["error"]["message"]
    assert os.listdir(vgw.tmp) == []


def test_local_picture_files(vgw, tmp_path):
    """A picture on this PC as an absolute path or a file:// URL: the same prompt as the same bytes sent inline
    (the gateway listens on 127.0.0.1); a server that listens beyond this PC refuses local files."""
    import asyncio
    import pathlib

    from gateway.vision.fetch import image_bytes
    from gateway.vision.images import ImageError, ImageRef
    png = encoded(picture(64, 96, seed=31))
    path = tmp_path / "local picture.png"
    path.write_bytes(png)
    text = {"type": "text", "text": "What is in this picture?"}

    def usage(part):
        r = requests.post(vgw.url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": [part, text]}], "max_tokens": 3, "reasoning_effort": "none"})
        assert r.status_code == 200, r.text
        return r.json()["usage"]["prompt_tokens"], r.json()["choices"][0]["message"]["content"]

    inline = usage(image_part(data_url(png)))
    assert usage(image_part(str(path))) == inline
    assert usage(image_part(pathlib.Path(path).as_uri())) == inline
    with pytest.raises(ImageError, match="only when the server listens on this PC only"):
        asyncio.run(image_bytes(ImageRef("messages[0].content[0]", "url", str(path)), 1 << 20, 5, local_files=False))


def test_anthropic_bad_pictures(vgw):
    import anthropic
    claude = anthropic.Anthropic(base_url=vgw.url, api_key="unused", max_retries=0, timeout=60)
    for source, want in [({"type": "base64", "media_type": "image/png", "data": base64.b64encode(b"junk").decode()},
                          "not a picture Pillow can read"),
                         ({"type": "url", "url": "ftp://example.com/a.png"}, "data: (base64), http(s)"),
                         ({"type": "file", "file_id": "file_1"}, "not supported")]:
        with pytest.raises(anthropic.BadRequestError) as e:
            claude.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": [
                {"type": "image", "source": source}, {"type": "text", "text": "hi"}]}])
        assert e.value.body["error"]["type"] == "invalid_request_error" and want in e.value.body["error"]["message"]
    assert claude.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": "hi"}]).content


def test_helper_death_gives_503_then_next_works(vgw):
    old = wait_helper(vgw)
    pid = old["pid"]
    os.kill(pid, signal.SIGSTOP)                  # the next ENC waits on a stopped helper ...
    got = {}
    t = threading.Thread(target=lambda: got.update(r=chat(vgw.url, [image_part(png_url(96, 96, seed=60))])))
    t.start()
    deadline = time.time() + 20
    while requests.get(vgw.url + "/status", timeout=5).json()["vision_state"] != "encoding":
        assert time.time() < deadline and t.is_alive(), got
        time.sleep(0.05)
    time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)                  # ... which then dies mid-request
    t.join(60)
    r = got["r"]
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "vision_unavailable" and "exited" in err["message"]
    new = wait_helper(vgw, not_pid=pid)
    assert new["restarts"] == old["restarts"] + 1
    ok = chat(vgw.url, [image_part(png_url(96, 96, seed=60))])
    assert ok.status_code == 200, ok.text
    # killed between requests: started again at once, the next request works
    os.kill(new["pid"], signal.SIGKILL)
    wait_helper(vgw, not_pid=new["pid"])
    assert chat(vgw.url, [image_part(png_url(96, 96, seed=61))]).status_code == 200
    assert chat(vgw.url, "Hello").status_code == 200
    assert health(vgw)["vision"]["restarts"] == old["restarts"] + 2
    assert os.listdir(vgw.tmp) == []


def test_client_leaving_during_encoding_loses_nothing(vgw):
    """A client that goes away while its picture is in the helper: the helper's reply is still read (not taken by
    the next request as its own), the request's files are removed, and the next picture gets its own rows."""
    pid = wait_helper(vgw)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.post(vgw.url + CHAT, timeout=3.0, json={"model": "m", "max_tokens": 3, "messages": [
                {"role": "user", "content": [image_part(png_url(128, 64, seed=70))]}]})
        assert requests.get(vgw.url + "/status", timeout=5).json()["vision_state"] == "encoding"
        time.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    r = chat(vgw.url, [image_part(png_url(64, 96, seed=71)), {"type": "text", "text": "and this?"}])
    assert r.status_code == 200, r.text
    assert health(vgw)["vision"]["pid"] == pid                  # the same helper, still in step
    assert vgw.read_log().rstrip().count("GENI: 1 picture(s), rows 2x3=6") >= 1
    deadline = time.time() + 10
    while os.listdir(vgw.tmp) and time.time() < deadline:
        time.sleep(0.1)
    assert os.listdir(vgw.tmp) == []


def test_stream_keeps_alive_while_encoding_and_reports_helper_death(vgw):
    """A stream opens before its pictures are encoded (the helper may take tens of seconds on a CPU): keep-alive
    comments flow meanwhile, then the answer; a helper that dies meanwhile gives an error event, then [DONE]."""
    def stream(seed):
        return requests.post(vgw.url + CHAT, stream=True, timeout=60, json={
            "model": "m", "max_tokens": 3, "stream": True, "reasoning_effort": "none",
            "messages": [{"role": "user", "content": [image_part(png_url(96, 64, seed=seed))]}]})

    def stopped_helper():
        pid = wait_helper(vgw)["pid"]
        os.kill(pid, signal.SIGSTOP)
        return pid

    pid = stopped_helper()
    try:
        r = stream(80)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        lines = r.iter_lines()
        first = next(lines)
        assert first.startswith(b"data: ") and json.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"
        got = [next(lines) for _ in range(3)]            # keep-alive comments (every 1 s here) while it waits
        assert b": keep-alive" in got
    finally:
        os.kill(pid, signal.SIGCONT)
    rest = [line for line in lines if line]
    assert rest[-1] == b"data: [DONE]"
    finals = [json.loads(x[6:]) for x in rest if x.startswith(b"data: {")]
    assert finals[-1]["choices"][0]["finish_reason"] in ("length", "stop") and finals[-1]["usage"]["prompt_tokens"]

    pid = stopped_helper()
    r = stream(81)
    lines = r.iter_lines()
    next(lines)
    deadline = time.time() + 20
    while requests.get(vgw.url + "/status", timeout=5).json()["vision_state"] != "encoding":
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    rest = [line for line in lines if line and not line.startswith(b":")]
    errors = [json.loads(x[6:]) for x in rest if x.startswith(b'data: {"error"')]
    assert errors and errors[0]["error"]["code"] == "vision_unavailable", rest
    assert rest[-1] == b"data: [DONE]"
    wait_helper(vgw, not_pid=pid)
    assert chat(vgw.url, [image_part(png_url(96, 64, seed=81))]).status_code == 200
