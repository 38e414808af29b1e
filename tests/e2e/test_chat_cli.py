# gateway/chat.py driven through a pseudo-terminal (pexpect) against the real gateway and engine: thinking
# streams dimmed, model text never reaches the terminal as raw control characters, Ctrl+C stops the answer
# mid-stream (the engine sees STOP), the next message is answered, and /think, /reset, /image and /quit do what
# they say.
import io
import re
import struct
import sys
import zlib
from pathlib import Path

import pexpect
import pytest

from e2e_helpers import PROJECT_DIR, Gateway, wait_until

DIM = "\x1b[2m"


def tiny_png(path) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    pixels = zlib.compress(b"\x00\xff\x00\x00")   # one red pixel
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


MAX_TOKENS = 1500


@pytest.fixture(scope="module")
def slow_gateway(engine_bin, tiny_models, artifacts_dir):
    """A gateway on the tiny model with the real 248,320-id vocabulary on one thread: its output matrix makes a token
    take a few ms, so an answer is still streaming when the test's Ctrl+C arrives (the other tiny model writes 1,500
    tokens in about a second)."""
    server = Gateway(Path(tiny_models("realvocab")["gguf"]["f32"]), Path(engine_bin),
                     artifacts_dir / "e2e-gateway-slow.log", "--engine-arg=--threads", "--engine-arg=1")
    yield server
    server.close()


def spawn_chat(gateway, think: str = "high"):
    chat = pexpect.spawn(sys.executable, ["-m", "gateway.chat", "--url", gateway.url, "--think", think,
                                          "--max-tokens", str(MAX_TOKENS)],
                         cwd=str(PROJECT_DIR), env={"PATH": "/usr/bin:/bin", "TERM": "xterm", "PYTHONPATH": ""},
                         encoding="utf-8", codec_errors="replace", timeout=30, dimensions=(40, 200))
    chat.logfile_read = io.StringIO()
    chat.expect(f"Connected to {gateway.health['model']}")
    chat.expect("you> ")
    return chat


def test_terminal_chat_shows_no_raw_control_characters(gateway):
    chat = spawn_chat(gateway)
    try:
        # This prompt's greedy answer from the tiny model has a carriage return in its first words.
        chat.sendline("Tell me about lighthouses")
        chat.expect_exact("strata>")
        chat.expect_exact(f"{DIM}(thinking) ")        # thinking is shown dimmed while it streams
        chat.expect(r"\[(\d+) tokens", timeout=120)
        chat.expect("you> ")
        chat.sendline("/quit")
        chat.expect(pexpect.EOF)
    finally:
        chat.close()
    assert chat.exitstatus == 0
    # Model text never reaches the terminal as raw control characters (a lone CR would overwrite the line).
    assert re.search(r"\r(?!\n)", chat.logfile_read.getvalue()) is None


def test_terminal_chat_stops_on_ctrl_c_and_answers_again(slow_gateway, tmp_path):
    gateway = slow_gateway
    cancels_before = gateway.log_path.read_text().count(", cancel")
    chat = spawn_chat(gateway)
    try:
        chat.sendline("Tell me about lighthouses")
        chat.expect_exact("strata>")
        chat.expect_exact(f"{DIM}(thinking) ")
        chat.expect(r"(?s).{40}")                      # text keeps coming
        chat.sendintr()                               # Ctrl+C mid-answer
        chat.expect_exact("[stopped]")
        chat.expect("you> ")
        gateway.wait_idle()
        wait_until(lambda: gateway.log_path.read_text().count(", cancel") == cancels_before + 1, 10,
                   "the engine's log line for the cancelled request")

        chat.sendline("/think none")
        chat.expect_exact("Thinking level: none.")
        chat.expect("you> ")
        chat.sendline("And a short one?")
        chat.expect_exact("strata>")
        chat.expect(r"\[(\d+) tokens", timeout=180)   # the answer ran to its end and reported its length
        assert 0 < int(chat.match.group(1)) <= MAX_TOKENS
        chat.expect("you> ")

        chat.sendline("/reset")
        chat.expect_exact("New conversation.")
        picture = tmp_path / "red.png"
        tiny_png(picture)
        chat.sendline(f"/image {picture}")
        chat.expect_exact("Attached red.png")
        chat.sendline("/think sideways")
        chat.expect_exact("/think takes one of none, low, medium, high, default")
        chat.sendline("/quit")
        chat.expect(pexpect.EOF)
    finally:
        chat.close()
    assert chat.exitstatus == 0
    assert re.search(r"\r(?!\n)", chat.logfile_read.getvalue()) is None
