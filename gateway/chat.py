# Terminal chat with a running Strata server, through its OpenAI API like any other client: streams answers,
# shows thinking dimmed, and takes /image <path>, /think none|low|medium|high|default, /reset, /quit.
# Usage: python -m gateway.chat [--url http://127.0.0.1:8080] [--api-key KEY] [--think LEVEL] [--max-tokens N]
import argparse
import base64
import json
import mimetypes
import os
import signal
import sys
from pathlib import Path

import requests

try:
    import readline  # noqa: F401 - gives input() line editing and history where the platform has it
except ImportError:
    pass

THINK_LEVELS = ("none", "low", "medium", "high", "default")
# Control characters in model text (carriage returns, escape sequences) would move the cursor or restyle the
# terminal; they are shown as U+FFFD instead. Tab and newline stay.
CONTROL_CHARS = {c: "\ufffd" for c in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f)}
HELP = ("Commands: /image <path> (attach a picture to the next message), /think none|low|medium|high|default, "
        "/reset (new conversation), /quit. Ctrl+C stops an answer.")


class Style:
    """ANSI styling, only when writing to a terminal and NO_COLOR is not set."""

    def __init__(self, enabled: bool):
        self.dim_on = "\x1b[2m" if enabled else ""
        self.bold_on = "\x1b[1m" if enabled else ""
        self.off = "\x1b[0m" if enabled else ""


class ChatSession:
    def __init__(self, url: str, api_key: str | None, think: str, max_tokens: int | None = None, out=sys.stdout):
        self.url = url.rstrip("/")
        self.max_tokens = max_tokens
        self.http = requests.Session()
        if api_key:
            self.http.headers["Authorization"] = f"Bearer {api_key}"
        self.think = think
        self.out = out
        self.style = Style(out.isatty() and not os.environ.get("NO_COLOR"))
        self.messages: list[dict] = []
        self.pending_images: list[str] = []
        self.health: dict = {}

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def connect(self) -> bool:
        try:
            self.health = self.http.get(f"{self.url}/health", timeout=10).json()
        except (requests.RequestException, ValueError) as e:
            self.write(f"Cannot reach the Strata server at {self.url}: {e}\n")
            return False
        images = "on" if self.health.get("images") else "off"
        self.write(f"Connected to {self.health.get('model', 'Strata')} at {self.url} "
                   f"(context {self.health.get('context', '?')}, images {images}, thinking {self.think}).\n{HELP}\n")
        return True

    # ---- commands ----

    def command(self, line: str) -> bool:
        """Runs a /command; returns False when the chat should end."""
        name, _, argument = line.partition(" ")
        argument = argument.strip()
        if name in ("/quit", "/exit"):
            return False
        if name == "/reset":
            self.messages.clear()
            self.pending_images.clear()
            self.write("New conversation.\n")
        elif name == "/think":
            if argument not in THINK_LEVELS:
                self.write(f"/think takes one of {', '.join(THINK_LEVELS)}, not {argument!r}.\n")
            else:
                self.think = argument
                self.write(f"Thinking level: {argument}.\n")
        elif name == "/image":
            self.attach_image(argument)
        elif name == "/help":
            self.write(HELP + "\n")
        else:
            self.write(f"Unknown command {name}. {HELP}\n")
        return True

    def attach_image(self, path_text: str) -> None:
        path = Path(path_text).expanduser()
        if not path_text or not path.is_file():
            self.write(f"/image: no such file {path_text!r}.\n")
            return
        if not self.health.get("images"):
            self.write("Note: the server says images are off; the picture will probably be refused.\n")
        mime = mimetypes.guess_type(path.name)[0] or "image/png"
        self.pending_images.append(f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}")
        self.write(f"Attached {path.name}; it goes with your next message.\n")

    # ---- one turn ----

    def request_body(self) -> dict:
        body = {"model": self.health.get("model", "strata"), "messages": self.messages, "stream": True,
                "stream_options": {"include_usage": True}}
        if self.think != "default":
            body["reasoning_effort"] = self.think
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        return body

    def ask(self, text: str) -> None:
        if self.pending_images:
            content = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": url}}
                                                          for url in self.pending_images]
        else:
            content = text
        self.messages.append({"role": "user", "content": content})
        self.pending_images = []
        reply = {"role": "assistant", "content": "", "reasoning_content": ""}
        try:
            stats = self.stream(reply)
        except KeyboardInterrupt:
            self.write(f"{self.style.off}\n[stopped]\n")
            stats = None
        except (requests.RequestException, RuntimeError) as e:
            self.write(f"{self.style.off}\nError: {e}\n")
            self.messages.pop()
            return
        if not reply["reasoning_content"]:
            del reply["reasoning_content"]
        self.messages.append(reply)
        if stats:
            self.write(f"{self.style.dim_on}[{stats}]{self.style.off}\n")

    def stream(self, reply: dict) -> str:
        """Streams one answer into `reply`, printing as it comes; returns a short stats line."""
        in_thinking = False
        stats = ""
        with self.http.post(f"{self.url}/v1/chat/completions", json=self.request_body(), stream=True,
                            timeout=(10, None)) as response:
            if response.status_code != 200:
                try:
                    detail = response.json().get("error", {}).get("message", response.text)
                except ValueError:
                    detail = response.text
                raise RuntimeError(f"HTTP {response.status_code}: {detail}")
            self.write(f"{self.style.bold_on}strata>{self.style.off} ")
            response.encoding = "utf-8"   # SSE is UTF-8; requests would guess ISO-8859-1 for text/* without charset
            for raw in response.iter_lines(decode_unicode=True):
                if not raw or not raw.startswith("data:"):
                    continue
                data = raw[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(event["error"].get("message", str(event["error"])))
                delta = (event.get("choices") or [{}])[0].get("delta") or {}
                if delta.get("reasoning_content"):
                    if not in_thinking:
                        self.write(f"{self.style.dim_on}(thinking) ")
                        in_thinking = True
                    self.write(delta["reasoning_content"].translate(CONTROL_CHARS))
                    reply["reasoning_content"] += delta["reasoning_content"]
                if delta.get("content"):
                    if in_thinking:
                        self.write(f"{self.style.off}\n")
                        in_thinking = False
                    self.write(delta["content"].translate(CONTROL_CHARS))
                    reply["content"] += delta["content"]
                for call in delta.get("tool_calls") or []:
                    function = call.get("function") or {}
                    self.write(f"[tool call {function.get('name', '')}{function.get('arguments', '')}]")
                if event.get("usage"):
                    usage, timings = event["usage"], event.get("timings") or {}
                    stats = f"{usage.get('completion_tokens', '?')} tokens"
                    if timings.get("predicted_per_second"):
                        stats += f", {timings['predicted_per_second']:.1f} tok/s"
        self.write(f"{self.style.off}\n")
        return stats


def run(session: ChatSession) -> int:
    if not session.connect():
        return 1
    while True:
        try:
            line = input("you> ").strip()
        except (EOFError, KeyboardInterrupt):
            session.write("\n")
            return 0
        if not line:
            continue
        if line.startswith("/"):
            if not session.command(line):
                return 0
            continue
        session.ask(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.chat", description="Chat with Strata in the terminal.")
    parser.add_argument("--url", default=os.environ.get("STRATA_URL", "http://127.0.0.1:8080"),
                        help="the Strata server (default http://127.0.0.1:8080)")
    parser.add_argument("--api-key", default=os.environ.get("STRATA_API_KEY"), help="API key, if the server needs one")
    parser.add_argument("--think", choices=THINK_LEVELS, default="default", help="thinking level")
    parser.add_argument("--max-tokens", type=int,
                        help="the longest answer, in tokens (default: the rest of the context)")
    args = parser.parse_args(argv)
    # Ctrl+C stops an answer. A process started from a non-interactive shell's background job inherits SIGINT ignored,
    # and Python then never raises KeyboardInterrupt: take the signal back explicitly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return run(ChatSession(args.url, args.api_key, args.think, args.max_tokens))


if __name__ == "__main__":
    sys.exit(main())
