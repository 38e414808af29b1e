"""A request for logprobs on an engine that speculates (the demo model with its MTP head) decodes one token a pass
and gives the tokens speculative greedy decoding gives; the others still speculate (protocol.md §4)."""
import subprocess

from test_checkpoints import DEMO, DEMO_MTP


def test_logprobs_request_gives_the_speculative_tokens(engine_bin):
    lines = "GEN 24 40,20,30\nGEN 24 logprobs=2 40,20,30\nGEN 24 40,20,30\n"
    r = subprocess.run([engine_bin, "--serve", "--model", DEMO, "--mtp", DEMO_MTP, "--threads", "2"], input=lines,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    requests, current = [], []
    for line in r.stdout.splitlines():
        if line.startswith("T "):
            current.append(line.split(" "))
        elif line.startswith("DONE "):
            requests.append((current, line.split(" ")))
            current = []
    assert len(requests) == 3
    (plain, plain_done), (lp, lp_done), (again, again_done) = requests
    assert [t[1] for t in lp] == [t[1] for t in plain] == [t[1] for t in again] and len(plain) >= 4
    assert all(len(t) == 2 for t in plain) and all(len(t) == 4 and t[3].startswith(t[1] + ":") for t in lp)
    assert int(plain_done[7]) > 0 and int(again_done[7]) > 0   # drafts offered: the others speculate
    assert lp_done[6:8] == ["0", "0"]                           # the logprobs request: no drafts
