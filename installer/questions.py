# The four questions (family, size, context, images), each with a recommended answer taken on Enter. A flag
# answers a question without asking; --yes (or no terminal) takes every recommendation.
import sys
from dataclasses import dataclass
from typing import Callable

from installer.recommend import CONTEXT_CHOICES, context_label, parse_context


@dataclass(frozen=True)
class Answers:
    family: str
    size: str
    context: int
    vision: bool


class Asker:
    """Asks on the terminal, or returns the recommendation when asking is off."""

    def __init__(self, interactive: bool, input_fn: Callable[[str], str] = input, say=print):
        self.interactive = interactive
        self.input_fn = input_fn
        self.say = say

    def choose(self, title: str, options: list[tuple[str, str]], default: str) -> str:
        """options: (value, description). Accepts the number or the value; Enter = default."""
        self.say(f"\n{title}")
        for number, (value, text) in enumerate(options, 1):
            mark = "  (recommended)" if value == default else ""
            self.say(f"  {number}. {value:<10} {text}{mark}")
        if not self.interactive:
            self.say(f"  -> {default}")
            return default
        values = [v for v, _ in options]
        while True:
            reply = self.input_fn(f"Choice [Enter = {default}]: ").strip()
            if not reply:
                return default
            if reply.isdigit() and 1 <= int(reply) <= len(options):
                return values[int(reply) - 1]
            matches = [v for v in values if v.lower() == reply.lower()]
            if matches:
                return matches[0]
            self.say(f"  '{reply}' is not one of the choices; type a number from 1 to {len(options)}.")

    def context(self, default: int) -> int:
        self.say("\nHow much context (how long a conversation or document the model can hold)?")
        self.say("  " + ", ".join(context_label(c) for c in CONTEXT_CHOICES)
                 + f"  (recommended for this GPU: {context_label(default)})")
        if not self.interactive:
            self.say(f"  -> {context_label(default)}")
            return default
        while True:
            reply = self.input_fn(f"Context [Enter = {context_label(default)}]: ").strip()
            if not reply:
                return default
            try:
                return parse_context(reply)
            except ValueError as e:
                self.say(f"  {e}")

    def yes_no(self, question: str, default: bool) -> bool:
        label = "Y/n" if default else "y/N"
        if not self.interactive:
            self.say(f"\n{question} -> {'yes' if default else 'no'}")
            return default
        while True:
            reply = self.input_fn(f"\n{question} [{label}]: ").strip().lower()
            if not reply:
                return default
            if reply in ("y", "yes", "n", "no"):
                return reply.startswith("y")
            self.say("  Please answer y or n.")


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()
