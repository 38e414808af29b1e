# The demo model's data generator is deterministic, its held-out split is disjoint and its worked answers are right;
# the committed tokenizer (the shipped GGUF's) keeps the special tokens as single ids, splits numbers into digits and
# encodes a copied code the same in the prompt and in the answer; a conversation encodes piecewise exactly as a whole;
# v3's working; v4's thinking-off answers with that working, its mix, and held-out cases that are v2's but for
# those answers.
import hashlib
import json
import random
import re

from demo_model import completion, data, facts
from demo_model import tokenizer as demo_tokenizer
from demo_model.train import SEED


def texts(seed, count):
    return ["".join(text for text, _ in pieces) for pieces in data.training_segments(seed, count)]


def test_generator_is_deterministic_and_seeded():
    assert texts(7, 40) == texts(7, 40)
    assert texts(7, 40) != texts(8, 40)


def case_key(case):
    """The defining values of a case, read back from its messages (what must never be shared across the split)."""
    user = [m["content"] for m in case.messages if m["role"] == "user"][-1]
    if case.kind == "arithmetic":
        a, op, b = re.search(r"(?:^|So )(\d+) (.) (\d+) = -?\d+\.$", case.expected["content"]).groups()
        return (op, int(a), int(b)) + ((user,) if op == "*" else ())  # products: held out by phrasing
    if case.kind in ("counting", "copy"):
        return user if case.kind == "counting" else case.expected["content"]
    if case.kind in ("tool_call", "tool_refusal"):
        return user
    return None


def test_held_out_values_are_disjoint_from_training():
    held_out = data.held_out_cases(3, 32)
    assert {c.kind for c in held_out} == set(data.MAKERS)
    assert sum(c.kind == "tool_refusal" for c in held_out) == 32
    rng = random.Random(5)
    training = {case_key(data.make_case(rng)) for _ in range(20000)}
    keys = [case_key(c) for c in held_out if case_key(c) is not None]
    assert len(keys) >= 5 * 32
    shared = [k for k in keys if k in training and not (isinstance(k, tuple) and k[0] == "*")]
    assert not shared, shared[:5]


def test_held_out_prompts_are_not_in_training():
    held_out = data.held_out_cases(3, 8)
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


def test_shipped_gguf_carries_the_committed_tokenizer():
    """The demo GGUF in installer/demo holds the same token list as tokenizer/ (tests encode prompts with it)."""
    import gguf
    reader = gguf.GGUFReader(str(demo_tokenizer.TOKENIZER_DIR.parents[3] / "installer" / "demo" / "strata-demo.gguf"))
    field = reader.fields["tokenizer.ggml.tokens"]
    in_gguf = [bytes(field.parts[i]).decode() for i in field.data]
    vocab = demo_tokenizer.load(demo_tokenizer.SHIPPED_TOKENIZER_DIR).get_vocab()
    assert in_gguf == sorted(vocab, key=vocab.get)


def test_special_tokens_are_single_ids():
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    for index, (text, _) in enumerate(demo_tokenizer.ADDED_TOKENS):
        assert tokenizer.encode(f"a{text}b", add_special_tokens=False).ids[1] == index
        assert tokenizer.encode(text, add_special_tokens=False).ids == [index]


def test_numbers_are_split_into_digits():
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    for text in ["12345 + 678 = 13023.", "Tens: 9 + 5 + 1 = 15.", "Count from 39 to 42.", "x907y"]:
        for token in tokenizer.encode(text, add_special_tokens=False).tokens:
            digits = re.sub(r"\D", "", token)
            assert len(digits) <= 1 and (not digits or token == digits), (text, token)


def test_v2_vocabulary_size():
    assert demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR).get_vocab_size() == demo_tokenizer.VOCAB_SIZE == 2048


def test_copied_codes_encode_alike_in_prompt_and_answer():
    """v2: after ": " a code's tokens equal the answer's, but for the leading space of the first one."""
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    rng = random.Random(2)
    codes = [p for p in (facts.pick_phrase(rng) for _ in range(400)) if facts.is_code(p)]
    assert len(codes) > 60
    for code in codes:
        answer = tokenizer.encode(code, add_special_tokens=False).tokens
        in_prompt = tokenizer.encode(f"Repeat after me: {code}", add_special_tokens=False).tokens[4:]
        if in_prompt[0] == "Ġ":
            in_prompt = in_prompt[1:]
        else:
            in_prompt[0] = in_prompt[0].removeprefix("Ġ")
        assert in_prompt == answer, (code, in_prompt, answer)


def test_worked_arithmetic_is_right():
    """Every equation in the reasoning holds, and the tens result followed by the ones digit is the answer."""
    rng = random.Random(0)
    for op in "+-":
        for a in range(100):
            for b in range(0, a + 1 if op == "-" else 100, 7):
                _, full, short, answer = facts.arithmetic_texts(rng, op, a, b)
                result = a + b if op == "+" else a - b
                assert answer == f"{a} {op} {b} = {result}."
                for left, right in re.findall(r"(\d+(?: [-+] \d+)+) = (\d+)", full + "\n" + short):
                    assert eval(left) == int(right), (a, op, b, left, right)
                write = int(re.search(r"Write (\d)", full).group(1))
                tens = int(re.search(r"Tens: .* = (\d+)\.", full).group(1))
                assert tens * 10 + write == result, (a, op, b, full)
                assert full.endswith(f"So {answer}")
    _, full, _, answer = facts.arithmetic_texts(rng, "*", 12, 7)
    assert answer == "12 * 7 = 84." and "84" in full


def test_v3_working_decides_the_borrow_after_both_ones_digits():
    """v3: "Ones: 6 - 9: 6 is less than 9, ..." (the branch token follows both digits), tens as two two-term facts,
    and low effort gets the same steps on one line."""
    for op in "+-":
        for a in range(100):
            for b in range(a + 1 if op == "-" else 100):
                full, short = facts.column_steps(op, a, b)
                assert short == full.replace("\n", " "), (a, op, b)
                ones, tens = full.split("\n")
                carry = int(a % 10 < b % 10) if op == "-" else (a % 10 + b % 10) // 10
                if op == "-":
                    branch = "is less than" if carry else "is not less than"
                    assert ones.startswith(f"Ones: {a % 10} - {b % 10}: {a % 10} {branch} {b % 10}"), ones
                first = eval(f"{a // 10} {op} {b // 10}")
                assert tens == f"Tens: {a // 10} {op} {b // 10} = {first}, {first} {op} {carry} = " \
                               f"{eval(f'{first} {op} {carry}')}.", tens
    assert facts.column_steps("-", 36, 19)[0] == ("Ones: 6 - 9: 6 is less than 9, borrow 1: 16 - 9 = 7. Write 7, "
                                                  "borrow 1.\nTens: 3 - 1 = 2, 2 - 1 = 1.")
    assert facts.column_steps("+", 37, 74)[0] == "Ones: 7 + 4 = 11. Write 1, carry 1.\nTens: 3 + 7 = 10, 10 + 1 = 11."


def test_v4_thinking_off_answer_shows_low_efforts_working():
    """v4: with thinking off a sum or difference answers with low effort's one-line working, then "So a op b = c.";
    a product stays the bare table fact; there is still no reasoning at all."""
    rng = random.Random(0)
    for op in "+-":
        for a in range(0, 100, 3):
            for b in range(0, a + 1 if op == "-" else 100, 5):
                _, _, short, answer = facts.arithmetic_texts(rng, op, a, b)
                assert facts.thinking_off_answer(op, a, b) == f"{short} So {answer}"
    assert facts.thinking_off_answer("-", 57, 43) == ("Ones: 7 - 3: 7 is not less than 3: 7 - 3 = 4. Write 4, "
                                                      "borrow 0. Tens: 5 - 4 = 1, 1 - 0 = 1. So 57 - 43 = 14.")
    assert facts.thinking_off_answer("*", 12, 7) == "12 * 7 = 84."
    rng = random.Random(3)
    for _ in range(300):
        case = data.make_case(rng, kind="arithmetic", effort="none")
        reply = case.messages[-1]
        assert "reasoning_content" not in reply and reply["content"] == case.expected["content"]
        a, op, b = re.search(r"(\d+) (.) (\d+) = -?\d+\.$", reply["content"]).groups()
        assert reply["content"] == facts.thinking_off_answer(op, int(a), int(b))
        trained = "".join(text for text, is_trained in data.segments(case) if is_trained)
        assert trained == reply["content"] + "<|im_end|>", trained  # the empty think block is in the prompt


def test_v4_mix_and_efforts():
    """v4 mix: arithmetic 36%, counting 22% with ranges in half of its training cases; every kind at 30% thinking
    off (v3 gave arithmetic 60%)."""
    rng = random.Random(9)
    cases = [data.make_case(rng) for _ in range(6000)]
    for kind, share in (("arithmetic", 0.36), ("counting", 0.22), ("copy", 0.18), ("tool_call", 0.10)):
        assert abs(sum(c.kind == kind for c in cases) / len(cases) - share) < 0.02, kind
    for kind in data.MAKERS:
        of_kind = [c for c in cases if c.kind == kind]
        assert abs(sum(c.effort == "none" for c in of_kind) / len(of_kind) - 0.30) < 0.06, kind
    counting = [c for c in cases if c.kind == "counting"]
    assert abs(sum("item" not in c.expected["content"] for c in counting) / len(counting) - 0.5) < 0.04


def held_out_fingerprint(cases):
    rows = [(c.kind, c.effort, [m["content"] for m in c.messages if m["role"] in ("user", "system", "tool")],
             [t["function"]["name"] for t in c.tools], json.dumps(c.expected, sort_keys=True)) for c in cases]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def as_v2(cases):
    """The cases with v2's expected answer where v4 changed it: a thinking-off sum or difference, whose answer now
    shows the working before "So"."""
    for case in cases:
        content = case.expected.get("content", "")
        if case.kind == "arithmetic" and case.effort == "none" and " So " in content:
            a, op, b = re.search(r"So (\d+) (.) (\d+) = -?\d+\.$", content).groups()
            assert op in "+-" and content == facts.thinking_off_answer(op, int(a), int(b)), content
            case.expected["content"] = content.rpartition(" So ")[2]
    return cases


def test_held_out_and_validation_cases_are_v2s_but_for_thinking_off_sums():
    """The evaluation's prompts, tools and expected answers are exactly v2's (fingerprints taken with the v2 code
    of commit 6127769), but for v4's thinking-off sums and differences, which now expect the working before the
    result; so v2, v3 and v4 scores compare directly, and the whole answer text stays what "exact" compares."""
    held_out = data.held_out_cases(SEED, 32)
    changed = [c for c in held_out if c.kind == "arithmetic" and c.effort == "none" and " So " in c.expected["content"]]
    assert len(changed) >= 4, len(changed)
    assert held_out_fingerprint(as_v2(held_out)) == \
        "0372f9c9fe93b9d6ecbd788b89d1f152e046cf4c4e167a8b665d62bc9d8f1661"
    assert held_out_fingerprint(as_v2(data.held_out_cases(SEED + 7, 16))) == \
        "98e8d46ed2e70f32db9f1847fd9cb3c5810e60ec4375789ff76873820138232e"


def test_tool_reasoning_names_the_offered_tools():
    rng = random.Random(4)
    for _ in range(200):
        case = data.make_case(rng, kind=rng.choice(["tool_call", "tool_refusal"]), effort="xhigh")
        offered = [t["function"]["name"] for t in case.tools]
        reasoning = next(m for m in case.messages if m["role"] == "assistant")["reasoning_content"]
        if case.kind == "tool_refusal":
            assert case.messages[-1]["content"] == case.expected["content"]
            assert "is not offered" in case.messages[-1]["reasoning_content"]
        else:
            assert case.expected["tool_call"]["name"] in offered
        if reasoning:
            assert f"I have {', '.join(offered)}." in reasoning


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


def test_probe_sorts_thinking_off_misses_by_step():
    """arithmetic_probe.classify reads v4's thinking-off working: a wrong result after right steps, a wrong borrow
    branch, a wrong fact; with thinking on the bare answer after the reasoning."""
    from demo_model.arithmetic_probe import classify
    right = facts.thinking_off_answer("-", 26, 19)
    assert classify("-", 26, 19, "none", right) == "right"
    assert classify("-", 26, 19, "none", right.replace("So 26 - 19 = 7.", "So 26 - 19 = 8.")) == "answer"
    assert classify("-", 26, 19, "none", right.replace("16 - 9 = 7", "16 - 9 = 8")) == "fact"
    assert classify("-", 26, 19, "none", "Ones: 6 - 9: 6 is not less than 9: 6 - 9 = 0. Write 0, borrow 0. "
                                         "Tens: 2 - 1 = 1, 1 - 0 = 1. So 26 - 19 = 10.") == "decision"
    assert classify("-", 26, 19, "none", "26 - 19 = 7.") == "no working"  # v3's answer
    short = facts.column_steps("-", 26, 19)[1]
    assert classify("-", 26, 19, "low", f"{short}\n</think>\n\n26 - 19 = 7.") == "right"
