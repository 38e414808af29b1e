"""`strata --serve` driven directly (the real binary, the tiny real-vocabulary model): start-up lines, every golden
transcript, STOP while the prompt is read and while tokens are generated, QUIT and end of input, seeded sampling,
greedy output equal to `strata generate`, and a reused session giving the same tokens as a fresh one."""
from __future__ import annotations

import glob
import os
import queue
import subprocess
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TRANSCRIPTS = sorted(glob.glob(os.path.join(HERE, "*.txt")))
CTX = 4096


class Engine:
    def __init__(self, binary: str, model: str, *extra: str):
        self.proc = subprocess.Popen([binary, "--serve", "--model", model, "--ctx", str(CTX), *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        self.info = {}
        while (line := self.read()).startswith("INFO "):
            key, _, value = line[5:].partition("=")
            self.info[key] = value
        self.ready = line

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 60) -> str | None:
        return self.lines.get(timeout=timeout)

    def request(self, line: str) -> list[str]:
        self.send(line)
        out = []
        while True:
            out.append(self.read())
            if out[-1] is None or out[-1].startswith(("DONE ", "ERR ")):
                return out

    def close(self) -> int:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        return self.proc.wait(30)


def run_generate(binary: str, model: str, prompt: list[int], n: int) -> list[int]:
    """`strata generate` (greedy, stop ids ignored): the ids it prints."""
    r = subprocess.run([binary, "generate", "--model", model, "--prompt-ids", ",".join(map(str, prompt)), "-n",
                        str(n), "--ignore-eos", "--ctx", str(CTX)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.strip().split(",") if x]


def tokens(lines: list[str]) -> list[int]:
    return [int(l[2:]) for l in lines if l.startswith("T ")]


def matches(pattern: str, line: str) -> bool:
    p, l = pattern.split(" "), line.split(" ")
    if l[0] == "DONE":   # protocol.md §8: DONE's optional key=value counters are not matched
        while len(l) > 11 and "=" in l[-1]:
            l.pop()
    return len(p) == len(l) and all(a == "*" or a == b for a, b in zip(p, l))


@pytest.fixture(scope="module")
def model(tiny_models) -> str:
    return tiny_models("realvocab")["gguf"]["q8_0"]


@pytest.fixture
def engine(engine_bin, model):
    e = Engine(engine_bin, model)
    yield e
    e.close()


def test_startup_lines(engine):
    assert engine.ready == f"READY {CTX} stop"
    assert engine.info["context"] == str(CTX) and engine.info["vocab"] == "248320"
    assert engine.info["stop_ids"] == "248046,248044" and engine.info["vision"] == "0"
    assert engine.info["version"]


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[os.path.basename(p) for p in TRANSCRIPTS])
def test_golden_transcript(path, engine):
    steps = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("> "):
                steps.append((line[2:], []))
            elif line.startswith("< "):
                steps[-1][1].append(line[2:])
    pending = None
    for send, expect in steps:
        engine.send(send)
        for pattern in expect:
            many = pattern.endswith(" ...")
            base = pattern[:-4] if many else pattern
            line = pending if pending is not None else engine.read()
            pending = None
            assert line is not None and matches(base, line), f"after {send[:60]!r}: expected {pattern!r}, got {line!r}"
            if base.startswith("PP "):
                last = line
            while many:
                line = engine.read()
                if not matches(base, line):
                    pending = line
                    break
                last = line
            if base.startswith("PP "):
                reached, total = last.split(" ")[1:3]
                assert reached == total, f"the last PP must reach the prompt's end: {last}"
    assert pending is None
    engine.send("QUIT")
    assert engine.read() is None
    assert engine.close() == 0


def long_prompt(n: int) -> str:
    return ",".join(str(1000 + (i * 7919) % 50000) for i in range(n))


def test_stop_while_reading_the_prompt(engine_bin, model):
    e = Engine(engine_bin, model, "--chunk", "16")
    try:
        e.send("GEN 8 " + long_prompt(3000))
        assert e.read() == "RESUME 0"
        first = e.read()
        assert first.startswith("PP 16 3000 "), first
        e.send("STOP")
        rest = []
        while not (rest and rest[-1].startswith(("DONE", "ERR"))):
            rest.append(e.read())
        done = rest[-1].split(" ")
        assert done[0] == "DONE" and done[1] == "0" and done[2] == "3000" and done[5] == "cancel", rest[-1]
        assert not any(l.startswith(("T ", "REUSED")) for l in rest)
        reached = int([l for l in [first] + rest if l.startswith("PP ")][-1].split(" ")[1])
        assert reached < 3000
        # The chunks read stay in the session; the same prompt again resumes from them and finishes normally.
        again = e.request("GEN 2 " + long_prompt(3000))
        assert again[0] == f"RESUME {reached}"
        assert again[-1].startswith("DONE 2 3000 ") and again[-1].split(" ")[8] == str(reached)
    finally:
        e.close()


def test_stop_while_generating(engine):
    engine.send("GEN 3000 248045,846,198")
    while not (line := engine.read()).startswith("T "):
        pass
    engine.send("STOP")
    rest = [line]
    while not rest[-1].startswith(("DONE", "ERR")):
        rest.append(engine.read())
    done = rest[-1].split(" ")
    n = len(tokens(rest))
    assert done[0] == "DONE" and done[5] in ("cancel", "stop") and int(done[1]) == n and n < 3000, rest[-1]
    # That STOP does not touch the next request.
    assert engine.request("GEN 2 5,6,7")[-1].startswith("DONE 2 3 ")


def test_quit_cancels_and_end_of_input_answers(engine_bin, model):
    e = Engine(engine_bin, model)
    e.send("GEN 3000 248045,846,198")
    assert e.read() == "RESUME 0"
    e.send("QUIT")
    lines = []
    while (line := e.read()) is not None:
        lines.append(line)
    assert lines[-1].startswith("DONE ") and lines[-1].split(" ")[5] in ("cancel", "stop")
    assert e.close() == 0
    e = Engine(engine_bin, model)
    e.send("GEN 20 248045,846,198")
    e.proc.stdin.close()
    lines = []
    while (line := e.read()) is not None:
        lines.append(line)
    assert lines[-1].startswith("DONE ") and len(tokens(lines)) == int(lines[-1].split(" ")[1])
    assert e.proc.wait(30) == 0


def test_seeded_sampling_repeats(engine):
    prompt = "248045,846,198,9707,11"
    a = tokens(engine.request(f"GEN 24 temperature=1.2 top_p=0.95 seed=11 {prompt}"))
    b = tokens(engine.request(f"GEN 24 temperature=1.2 top_p=0.95 seed=11 {prompt}"))
    c = tokens(engine.request(f"GEN 24 temperature=1.2 top_p=0.95 seed=12 {prompt}"))
    assert a == b and len(a) > 0
    assert a != c
    k1 = tokens(engine.request(f"GEN 16 temperature=5 top_k=1 seed=3 {prompt}"))
    greedy = tokens(engine.request(f"GEN 16 {prompt}"))
    assert k1 == greedy  # top_k=1 is greedy whatever the temperature


def test_greedy_equals_strata_generate(engine, engine_bin, model):
    prompt = [248045, 846, 198, 9707, 11, 1879, 0]
    want = run_generate(engine_bin, model, prompt, 12)
    got = tokens(engine.request(f"GEN 12 {','.join(map(str, prompt))}"))
    stop = next((i for i, t in enumerate(want) if t in (248044, 248046)), None)
    assert got == (want if stop is None else want[:stop + 1])


def test_logprobs_are_the_log_softmax_of_the_logits(engine, engine_bin, model, tmp_path):
    """logprobs=5: each T line's logprob and alternatives equal log_softmax of the logits `strata generate`
    writes for the same greedy run, and asking for them does not change the tokens."""
    import numpy as np
    prompt = [248045, 846, 198, 9707, 11, 1879]
    logits_file = tmp_path / "logits.f32"
    r = subprocess.run([engine_bin, "generate", "--model", model, "--prompt-ids", ",".join(map(str, prompt)), "-n",
                        "6", "--ignore-eos", "--ctx", str(CTX), "--logits-out", str(logits_file)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = np.fromfile(logits_file, dtype=np.float32).reshape(-1, 248320).astype(np.float64)
    log_p = rows - rows.max(axis=1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(axis=1, keepdims=True))
    lines = [l for l in engine.request(f"GEN 6 logprobs=5 {','.join(map(str, prompt))}") if l.startswith("T ")]
    plain = tokens(engine.request(f"GEN 6 {','.join(map(str, prompt))}"))
    assert len(lines) == len(plain) == 6
    for step, line in enumerate(lines):
        f = line.split(" ")
        token, lp = int(f[1]), float(f[2])
        top = [(int(i), float(v)) for i, _, v in (x.partition(":") for x in f[3].split(","))]
        assert token == plain[step] == int(np.argmax(rows[step]))
        assert abs(lp - log_p[step, token]) < 1e-4
        want = sorted(range(248320), key=lambda v: (-rows[step, v], v))[:5]
        assert [i for i, _ in top] == want and top[0] == (token, lp)
        assert all(abs(v - log_p[step, i]) < 1e-4 for i, v in top)


def test_reused_session_gives_the_same_tokens(engine_bin, model):
    prompt = [248045, 846, 198, 9707]
    fresh = run_generate(engine_bin, model, prompt, 10)
    e = Engine(engine_bin, model)
    try:
        first = e.request(f"GEN 5 {','.join(map(str, prompt))}")
        t = tokens(first)
        assert t == fresh[:5]
        follow = e.request("GEN 5 " + ",".join(map(str, prompt + t)))
        assert follow[0] == f"RESUME {len(prompt) + 4}"   # the 5th token was never fed
        assert tokens(follow) == fresh[5:10]
    finally:
        e.close()
