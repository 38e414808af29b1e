# The demo model's data generator is deterministic and its held-out split is disjoint; the committed tokenizer keeps
# the special tokens as single ids and encodes a conversation piecewise exactly as a whole.
from demo_model import completion, data, facts
from demo_model import tokenizer as demo_tokenizer


def texts(seed, count):
    return ["".join(text for text, _ in pieces) for pieces in data.training_segments(seed, count)]


def test_generator_is_deterministic_and_seeded():
    assert texts(7, 40) == texts(7, 40)
    assert texts(7, 40) != texts(8, 40)


def test_held_out_cases_are_not_in_training():
    held_out = data.held_out_cases(3, 8)
    assert {c.kind for c in held_out} >= {"arithmetic", "counting", "copy", "tool_call", "tool_refusal", "chat"}
    training = "\n".join(texts(3, 3000))
    for case in held_out:
        if case.kind in ("arithmetic", "copy", "counting"):
            user = [m["content"] for m in case.messages if m["role"] == "user"][-1]
            assert user + "<|im_end|>" not in training, user


def test_every_trained_piece_is_one_assistant_turn():
    for pieces in data.training_segments(11, 200):
        for text, trained in pieces:
            if trained:
                assert text.endswith("<|im_end|>") and text.count("<|im_end|>") == 1
                assert "<|im_start|>" not in text


def test_thinking_off_prompts_close_the_think_block():
    case = data.make_case(__import__("random").Random(1), kind="arithmetic", effort="none")
    prompt = data.render(case.messages[:-1], effort="none", add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "Reasoning effort" not in prompt


def test_special_tokens_are_single_ids():
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    for index, (text, _) in enumerate(demo_tokenizer.ADDED_TOKENS):
        assert tokenizer.encode(f"a{text}b", add_special_tokens=False).ids[1] == index
        assert tokenizer.encode(text, add_special_tokens=False).ids == [index]


def test_piecewise_encoding_equals_whole_encoding():
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    for pieces in data.training_segments(5, 100):
        ids, trained = demo_tokenizer.encode_segments(tokenizer, pieces)
        assert ids == tokenizer.encode("".join(t for t, _ in pieces), add_special_tokens=False).ids
        assert any(trained)


def test_completion_parser_reads_tool_calls_and_thinking():
    text = ("I will look.\n</think>\n\n<tool_call>\n<function=convert_units>\n<parameter=value>\n5\n</parameter>\n"
            "<parameter=from_unit>\nkm\n</parameter>\n</function>\n</tool_call>")
    parsed = completion.parse_completion(text, thinking=True)
    assert parsed["reasoning"] == "I will look." and parsed["content"] == ""
    assert parsed["tool_calls"] == [{"name": "convert_units", "arguments": {"value": "5", "from_unit": "km"}}]
    assert facts.TOOLS["convert_units"]["function"]["parameters"]["properties"]["value"]["type"] == "number"
