"""Grammar-constrained output through the serve protocol on the demo model (docs/grammar.md, protocol.md §3): a
grammar that allows every text gives the same tokens as none (the constraint only removes tokens), and speculation
under a grammar gives the tokens of decoding one at a time; a JSON grammar's
answer is a whole sentence of it, checked by `strata grammar-check` and json.loads; grammar_after leaves the reasoning
free and constrains what follows </think>; a bad grammar is an ERR and the engine goes on serving."""
import base64
import json
import os
import subprocess

from test_checkpoints import DEMO, DEMO_MTP, tokens

from gateway.text.gguf_meta import read_gguf_meta
from gateway.text.tokenizer import load_tokenizer

QUESTION = "<|im_start|>user\nWhat is 23 plus 45?<|im_end|>\n<|im_start|>assistant\n"
ANSWER_GRAMMAR = r"""root   ::= ws "{" ws "\"answer\"" ws ":" ws int ws "," ws "\"sure\"" ws ":" ws bool ws "," ws "\"why\"" ws ":" ws string ws "}"
int    ::= "-"? ( "0" | [1-9] [0-9]{0,5} )
bool   ::= "true" | "false"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] ){0,24} "\""
ws     ::= [ \t\n]{0,4}
"""


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def run(engine_bin, lines, *extra):
    r = subprocess.run([engine_bin, "--serve", "--model", DEMO, "--threads", "2", *extra], input="".join(lines),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    out, cur = [], None
    for line in r.stdout.splitlines():
        if line.startswith("RESUME"):
            cur = {"tokens": []}
        elif line.startswith("T ") and cur is not None:
            cur["tokens"].append(int(line.split()[1]))
        elif line.startswith("DONE") and cur is not None:
            cur["done"] = line.split()
            out.append(cur)
            cur = None
        elif line.startswith("ERR"):
            out.append({"err": line[4:]})
            cur = None
    return out


def tokenizer():
    return load_tokenizer(DEMO, read_gguf_meta(DEMO))


def stop_ids():
    tok = tokenizer()
    return {tok.id_of("<|im_end|>"), tok.id_of("<|endoftext|>")}


def check_with_engine(engine_bin, tmp_path, grammar, text):
    g = tmp_path / "g.gbnf"
    t = tmp_path / "t.txt"
    g.write_text(grammar)
    t.write_bytes(text)
    r = subprocess.run([engine_bin, "grammar-check", str(g), str(t)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split(": ", 1)[1].strip()


def test_open_grammar_gives_the_greedy_tokens(engine_bin):
    ids = ",".join(map(str, tokens(QUESTION + "<think>\n\n</think>\n\n")))
    free, constrained = run(engine_bin, [f"GEN 40 {ids}\n", f"GEN 40 grammar={b64('root ::= .*')} {ids}\n"],
                            "--mtp", DEMO_MTP)
    assert constrained["tokens"] == free["tokens"] and len(free["tokens"]) >= 8
    assert int(free["done"][7]) > 0 and int(constrained["done"][7]) > 0   # both speculated


def test_speculation_under_a_grammar_gives_its_greedy_tokens(engine_bin):
    # Drafts and their verification take the grammar's choices: the tokens equal decoding one token a pass.
    ids = ",".join(map(str, tokens(QUESTION + "<think>\n\n</think>\n\n")))
    line = f"GEN 120 grammar={b64(ANSWER_GRAMMAR)} {ids}\n"
    (one,) = run(engine_bin, [line])
    (spec,) = run(engine_bin, [line], "--mtp", DEMO_MTP)
    assert spec["tokens"] == one["tokens"] and len(one["tokens"]) >= 10
    assert int(spec["done"][7]) > 0 and int(spec["done"][6]) > 0   # drafts offered and accepted
    # The same with the reasoning free before </think> (grammar_after), drafting across the switch.
    close = tokenizer().id_of("</think>")
    ids = ",".join(map(str, tokens(QUESTION + "<think>\n")))
    line = f"GEN 300 grammar={b64(ANSWER_GRAMMAR)} grammar_after={close} {ids}\n"
    (one,) = run(engine_bin, [line])
    (spec,) = run(engine_bin, [line], "--mtp", DEMO_MTP)
    assert spec["tokens"] == one["tokens"] and close in one["tokens"]


def test_json_grammar_answer_is_a_whole_sentence(engine_bin, tmp_path):
    ids = ",".join(map(str, tokens(QUESTION + "<think>\n\n</think>\n\n")))
    (res,) = run(engine_bin, [f"GEN 200 grammar={b64(ANSWER_GRAMMAR)} {ids}\n"])
    assert res["done"][5] == "stop", res
    assert res["tokens"][-1] in stop_ids()
    text = b"".join(tokenizer().token_bytes(t) for t in res["tokens"][:-1])
    assert check_with_engine(engine_bin, tmp_path, ANSWER_GRAMMAR, text) == "complete", text
    value = json.loads(text)
    assert set(value) == {"answer", "sure", "why"} and isinstance(value["answer"], int)
    # Sampling keeps to the grammar too.
    (res,) = run(engine_bin, [f"GEN 200 temperature=1.2 seed=3 grammar={b64(ANSWER_GRAMMAR)} {ids}\n"])
    text = b"".join(tokenizer().token_bytes(t) for t in res["tokens"] if t not in stop_ids())
    assert json.loads(text)["sure"] in (True, False)


def test_grammar_after_leaves_the_reasoning_free(engine_bin):
    tok = tokenizer()
    close = tok.id_of("</think>")
    assert close is not None
    ids = ",".join(map(str, tokens(QUESTION + "<think>\n")))
    (free,) = run(engine_bin, [f"GEN 300 {ids}\n"])
    assert close in free["tokens"], "the demo model closes its reasoning"
    (res,) = run(engine_bin, [f"GEN 300 grammar={b64(ANSWER_GRAMMAR)} grammar_after={close} {ids}\n"])
    cut = res["tokens"].index(close)
    assert res["tokens"][:cut + 1] == free["tokens"][:cut + 1]   # the reasoning is the model's own
    text = b"".join(tok.token_bytes(t) for t in res["tokens"][cut + 1:] if t not in stop_ids())
    assert set(json.loads(text)) == {"answer", "sure", "why"}


def test_bad_grammar_is_an_error_and_serving_goes_on(engine_bin):
    ids = ",".join(map(str, tokens(QUESTION)))
    unclosed = b64('root ::= ("a"')
    bad, unknown, good = run(engine_bin, [f"GEN 4 grammar={unclosed} {ids}\n",
                                          f"GEN 4 grammar={b64('root ::= x')} {ids}\n", f"GEN 4 {ids}\n"])
    assert bad["err"] == "bad grammar: a group '(' is not closed (line 1, column 10)"
    assert unknown["err"] == "bad grammar: the rule 'x' is used but not defined (line 1, column 10)"
    assert len(good["tokens"]) >= 1


def test_grammar_check_cli(engine_bin, tmp_path):
    assert check_with_engine(engine_bin, tmp_path, ANSWER_GRAMMAR, b'{"answer": 68, "sure": true, "why": "sum"}') \
        == "complete"
    assert check_with_engine(engine_bin, tmp_path, ANSWER_GRAMMAR, b'{"answer": 68') == "prefix"
    assert check_with_engine(engine_bin, tmp_path, ANSWER_GRAMMAR, b'{"answer": "68"') == "rejected at byte 11"
    g = tmp_path / "bad.gbnf"
    g.write_text("root ::= [a-\n")
    r = subprocess.run([engine_bin, "grammar-check", str(g)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "bad grammar" in r.stderr
    assert os.path.exists(engine_bin)
