"""Parked conversations (--park-mib): a long conversation that another prompt displaces is kept in RAM, and a later
prompt that continues it reads only what is new (RESUME = its length), with the same answer as a fresh engine that
reads the whole prompt; with the trunk's MTP head too. Without parking (--park-mib 0, or a budget too small) the same
continuation is read again from the start. A short side request (a client's title request) is what displaces it."""
import subprocess

from test_checkpoints import DEMO, DEMO_MTP, tokens

SYSTEM_A = "<|im_start|>system\n" + " ".join(f"Rule {i}: answer briefly and count carefully." for i in range(45)) \
    + "<|im_end|>\n"
SYSTEM_B = "<|im_start|>system\nYou write short titles.<|im_end|>\n"


def turn(question):
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def serve(engine_bin, prompts, *extra, max_new=24):
    """Runs the prompts in order (each a list of ids, or a function of the earlier results giving one); returns per
    request (RESUME count, generated ids) and the engine's stderr."""
    proc = subprocess.Popen([engine_bin, "--serve", "--model", DEMO, "--threads", "2", "--ctx", "4096", *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = []
    for p in prompts:
        ids = p(results) if callable(p) else p
        proc.stdin.write(f"GEN {max_new} {','.join(map(str, ids))}\n")
        proc.stdin.flush()
        resume, toks = None, []
        while True:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-800:]
            if line.startswith("RESUME"):
                resume = int(line.split()[1])
            elif line.startswith("T "):
                toks.append(int(line.split()[1]))
            elif line.startswith("DONE"):
                break
            elif line.startswith("ERR"):
                raise AssertionError(line)
        results.append({"prompt": ids, "resume": resume, "tokens": toks})
    proc.stdin.write("QUIT\n")
    proc.stdin.flush()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err[-800:]
    return results, err


def session_after(result):
    """The tokens the engine's session holds after a request: the prompt and the generated tokens it fed (all but the
    last, a stop or the max_new-th, which is never fed)."""
    return result["prompt"] + result["tokens"][:-1]


A = tokens(SYSTEM_A + turn("What is 12 plus 30?"))
B = tokens(SYSTEM_B + turn("Title for: a chat about sums"))
FOLLOW_UP = tokens("<|im_end|>\n" + turn("And 5 plus 6?"))


def continue_a(results):
    return session_after(results[0]) + FOLLOW_UP


def test_a_displaced_conversation_resumes_where_it_was(engine_bin):
    assert len(A) > 560 and len(B) < 100
    (a, b, a2), err = serve(engine_bin, [A, B, continue_a])
    assert b["resume"] < 10                            # B shares next to nothing with A
    assert a2["resume"] == len(session_after(a))       # A continues without re-reading
    assert "parked a conversation of" in err and "resumed a parked conversation" in err
    (fresh,), _ = serve(engine_bin, [a2["prompt"]])
    assert fresh["resume"] == 0 and a2["tokens"] == fresh["tokens"]
    # Without parking, the same continuation is read from the start (A's checkpoints lie under B's rows).
    (_, _, cold), _ = serve(engine_bin, [A, B, continue_a], "--park-mib", "0")
    assert cold["resume"] == 0 and cold["tokens"] == fresh["tokens"]


def test_parked_with_the_mtp_head(engine_bin):
    (a, b, a2), _ = serve(engine_bin, [A, B, continue_a], "--mtp", DEMO_MTP)
    assert a2["resume"] == len(session_after(a))
    (fresh,), _ = serve(engine_bin, [a2["prompt"]], "--mtp", DEMO_MTP)
    assert a2["tokens"] == fresh["tokens"]


def test_a_budget_too_small_parks_nothing(engine_bin):
    (_, _, a2), err = serve(engine_bin, [A, B, continue_a], "--park-mib", "1")
    assert a2["resume"] == 0 and "not parked" in err


def test_going_back_and_forth(engine_bin):
    # A, then B, then A continued (resumed), then B again: B was too short to park, A is parked again (replacing its
    # older copy), and A's next turn resumes once more.
    def continue_a2(results):
        return session_after(results[2]) + tokens("<|im_end|>\n" + turn("And 7 plus 8?"))
    results, err = serve(engine_bin, [A, B, continue_a, B, continue_a2])
    assert results[2]["resume"] == len(session_after(results[0]))
    assert results[4]["resume"] == len(session_after(results[2]))
    (fresh,), _ = serve(engine_bin, [results[4]["prompt"]])
    assert results[4]["tokens"] == fresh["tokens"]
    assert err.count("resumed a parked conversation") == 2
