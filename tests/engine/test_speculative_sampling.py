"""Sampling requests speculate too (generate/draft_rule.h): on the demo model with its MTP head a draft stands with the
sampler's probability of it and a rejected one is left out of the next draw, so the tokens follow the sampler's
distribution. Checked here: drafts are accepted at a temperature; top_k=1 sampling gives the greedy tokens; penalties
speculate with the penalised choices; the second token's distribution over 200 seeds matches decoding one at a time."""
import subprocess
from collections import Counter

from test_checkpoints import DEMO, DEMO_MTP, tokens

PROMPT = ",".join(map(str, tokens("<|im_start|>user\nTell me about the number 7.<|im_end|>\n<|im_start|>assistant\n"
                                  "<think>\n\n</think>\n\n")))


def run(engine_bin, lines, *extra):
    r = subprocess.run([engine_bin, "--serve", "--model", DEMO, "--threads", "2", *extra], input="".join(lines),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-800:]
    out, cur = [], []
    for line in r.stdout.splitlines():
        if line.startswith("T "):
            cur.append(int(line.split()[1]))
        elif line.startswith("DONE"):
            out.append((cur, line.split()))
            cur = []
    return out


def test_sampling_speculates(engine_bin):
    ((toks, done),) = run(engine_bin, [f"GEN 64 temperature=0.7 seed=3 {PROMPT}\n"], "--mtp", DEMO_MTP)
    assert len(toks) >= 16 and int(done[6]) > 0 and int(done[7]) >= int(done[6])


def test_top_k_1_sampling_is_greedy(engine_bin):
    lines = [f"GEN 48 {PROMPT}\n", f"GEN 48 temperature=1.3 top_k=1 seed=9 {PROMPT}\n"]
    (greedy, _), (sampled, done) = run(engine_bin, lines, "--mtp", DEMO_MTP)
    assert sampled == greedy and int(done[6]) > 0


def test_penalties_speculate_with_the_penalised_choices(engine_bin):
    line = f"GEN 48 repeat_penalty=1.3 presence_penalty=0.5 {PROMPT}\n"
    ((one, _),) = run(engine_bin, [line])
    ((spec, done),) = run(engine_bin, [line], "--mtp", DEMO_MTP)
    assert spec == one and int(done[6]) > 0


def test_second_token_distribution(engine_bin):
    n = 200
    lines = [f"GEN 3 temperature=1.0 seed={s} {PROMPT}\n" for s in range(n)]
    one = Counter(t[1] for t, _ in run(engine_bin, lines))
    spec_runs = run(engine_bin, lines, "--mtp", DEMO_MTP)
    spec = Counter(t[1] for t, _ in spec_runs)
    assert sum(int(d[6]) for _, d in spec_runs) > n // 4   # many second tokens were accepted drafts
    tv = sum(abs(one[k] - spec[k]) for k in set(one) | set(spec)) / (2 * n)
    assert tv < 0.1, (tv, one.most_common(5), spec.most_common(5))
