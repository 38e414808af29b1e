"""Writes tests/gpu/parked_prompts.json: the ids of tests/engine/test_parked_conversations.py's prompts (conversation A,
side request B, A's follow-up) for tests/gpu/parked_parity.py, which runs where the tokenizer is not installed."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
sys.path.insert(0, os.path.join(HERE, ".."))
from test_parked_conversations import A, B, FOLLOW_UP  # noqa: E402

with open(os.path.join(HERE, "parked_prompts.json"), "w") as f:
    json.dump({"a": A, "b": B, "follow_up": FOLLOW_UP}, f)
