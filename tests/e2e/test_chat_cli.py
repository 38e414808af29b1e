# gateway/chat.py driven through a pseudo-terminal (pexpect) against the real gateway and engine: thinking
# streams dimmed, Ctrl+C stops the answer mid-stream (the engine sees STOP), the next message is answered, and
# /think, /reset, /image and /quit do what they say.
import io
import re
import struct
import sys
import zlib

import pexpect

from e2e_helpers import PROJECT_DIR, wait_until

DIM = "\x1b[2m"


def tiny_png(path) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    pixels = zlib.compress(b"\x00\xff\x00\x00")   # one red pixel
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))


MAX_TOKENS = 8000
ATTEMPTS = 4


def spawn_chat(gateway):
    chat = pexpect.spawn(sys.executable, ["-m", "gateway.chat", "--url", gateway.url, "--think", "high",
                                          "--max-tokens", str(MAX_TOKENS)],
                         cwd=str(PROJECT_DIR), env={"PATH": "/usr/bin:/bin", "TERM": "xterm", "PYTHONPATH": ""},
                         encoding="utf-8", codec_errors="replace", timeout=30, dimensions=(40, 200))
    chat.logfile_read = io.StringIO()
    chat.expect(f"Connected to {gateway.health['model']}")
    chat.expect("you> ")
    return chat


def test_terminal_chat_streams_stops_on_ctrl_c_and_answers_again(gateway, tmp_path):
    cancels_before = gateway.log_path.read_text().count(", cancel")
    chat = None
    try:
        # The tiny model writes its whole answer in about a second, so on a loaded machine this process can see the
        # first 40 characters only after the answer has ended, and the Ctrl+C then meets the prompt instead. Such a
        # try starts over in a new chat process; a Ctrl+C that lands mid-answer must stop it.
        for attempt in range(ATTEMPTS):
            chat = spawn_chat(gateway)
            # (This prompt's greedy answer from the tiny model has a carriage return in its first words.)
            chat.sendline("Tell me about lighthouses")
            chat.expect_exact("strata>")
            chat.expect_exact(f"{DIM}(thinking) ")       # thinking is shown dimmed while it streams
            chat.expect(r"(?s).{40}")                      # and text keeps coming
            chat.sendintr()                               # Ctrl+C mid-answer
            if chat.expect([re.escape("[stopped]"), r"\[\d+ tokens"]) == 0:
                break
            chat.close(force=True)
            gateway.wait_idle()
        else:
            raise AssertionError(f"in {ATTEMPTS} tries Ctrl+C never landed before the answer ended")
        transcript = chat.logfile_read
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
        if chat is not None:
            chat.close()
    assert chat.exitstatus == 0
    # Model text never reaches the terminal as raw control characters (a lone CR would overwrite the line).
    assert re.search(r"\r(?!\n)", transcript.getvalue()) is None
