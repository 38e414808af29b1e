"""The engine's image input (GENI, `strata --serve --vision`) against transformers' Qwen4ExpForConditionalGeneration:
a tiny random VLM (vision_oracle.py), image features from transformers' own vision tower written in the SVE1
format, prompts with one and with two images of different grids between text. Greedy tokens must be identical and
logits equal within float rounding (`strata generate --images`), over the protocol too; GENI's faults give ERR
and the engine keeps serving; a text GEN after a GENI still matches transformers; a follow-up with another picture
(same placeholder ids) never reuses the old picture's cache, while the same picture does."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import vision_oracle as vo  # noqa: E402

REL_TOL = 1e-4            # max |Δ| / max |logit| per generated position (as test_oracle.py)
N_NEW = 24
IM_START = 480            # <|im_start|> of the small vocabulary (conversation checkpoints go before the last one)
STOPS = (479, 481)        # <|endoftext|>, <|im_end|>
# Patch grids (t, h, w) of the test images; merged grids (ny × nx) 4 × 3, 2 × 5 and 3 × 3.
GRIDS = {"A": (1, 8, 6), "B": (1, 4, 10), "C": (1, 6, 6)}


@pytest.fixture(scope="module")
def vlm():
    m = vo.build()
    model = vo.load_hf(m["hf_dir"])
    return m, model


def text(rng, n):
    return [rng.randrange(470) for _ in range(n)]


def image_tokens(grid, image_id):
    _, h, w = grid
    return [vo.VISION_START] + [image_id] * ((h // 2) * (w // 2)) + [vo.VISION_END]


class Images:
    """Pixel values, transformers' features and an SVE1 file for a list of (grid name, pixel seed)."""

    def __init__(self, model, tmp_path, picks, name):
        self.grids = [GRIDS[g] for g, _ in picks]
        self.pixels = torch.cat([vo.pixels([GRIDS[g]], seed) for g, seed in picks]) if picks else None
        self.feats = vo.image_features(model, self.pixels, self.grids) if picks else []
        self.path = str(tmp_path / f"{name}.sve")
        vo.write_sve(self.path, self.feats, self.grids)


def prompts(image_id):
    """Prompts with one image and with two images of different grids between text (and a long one, so the QSA
    indexer selects blocks around the image: budget 16 tokens, blocks of 4)."""
    rng = random.Random(11)
    one = text(rng, 6) + image_tokens(GRIDS["A"], image_id) + text(rng, 9)
    two = (text(rng, 5) + image_tokens(GRIDS["A"], image_id) + text(rng, 7) + image_tokens(GRIDS["B"], image_id)
           + text(rng, 9))
    long = text(rng, 40) + image_tokens(GRIDS["B"], image_id) + text(rng, 70) + image_tokens(GRIDS["C"], image_id) + text(rng, 30)
    return {"one": (one, [("A", 1)]), "two": (two, [("A", 2), ("B", 3)]), "long": (long, [("B", 4), ("C", 5)])}


def engine_generate(engine, gguf, ids, n, sve, tmp_path, *extra):
    out = str(tmp_path / "logits.bin")
    cmd = [engine, "generate", "--model", gguf, "--prompt-ids", ",".join(map(str, ids)), "-n", str(n), "--ignore-eos",
           "--logits-out", out, *extra]
    if sve:
        cmd += ["--images", sve]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.strip().split(",")], np.fromfile(out, dtype=np.float32).reshape(n, -1)


def max_rel(a, b):
    return float((np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)).max())


def until_stop(tokens):
    for i, t in enumerate(tokens):
        if t in STOPS:
            return tokens[:i + 1]
    return tokens


@pytest.mark.parametrize("name", ["one", "two", "long"])
def test_generate_with_images_equals_transformers(engine_bin, vlm, tmp_path, name):
    m, model = vlm
    ids, picks = prompts(m["image_token_id"])[name]
    im = Images(model, tmp_path, picks, name)
    hf_tokens, hf_logits = vo.hf_greedy(model, ids, im.pixels, im.grids, N_NEW)
    tokens, logits = engine_generate(engine_bin, m["gguf"], ids, N_NEW, im.path, tmp_path)
    rel = max_rel(logits, hf_logits)
    print(f"{name}: {len(ids)} prompt tokens, {len(picks)} image(s): max rel {rel:.2e}")
    assert tokens == hf_tokens, f"{name}: greedy tokens differ\n hf     {hf_tokens}\n engine {tokens}"
    assert rel <= REL_TOL, f"{name}: logits differ by {rel:.3e}"
    # Prompt chunks that end inside an image and thread counts change nothing (bit for bit).
    for extra in (["--chunk", "5"], ["--chunk", "1"], ["--threads", "2"]):
        t2, l2 = engine_generate(engine_bin, m["gguf"], ids, 6, im.path, tmp_path, *extra)
        assert t2 == tokens[:6] and np.array_equal(l2, logits[:6]), f"{name}: {extra} changed the result"


def test_positions_matter(engine_bin, vlm, tmp_path):
    """The comparison can fail: transformers with the images' features at text positions (no M-RoPE) disagrees
    with the engine, and so does the engine reading the placeholders' own embeddings."""
    m, model = vlm
    ids, picks = prompts(m["image_token_id"])["two"]
    im = Images(model, tmp_path, picks, "two")
    _, logits = engine_generate(engine_bin, m["gguf"], ids, 8, im.path, tmp_path)
    with torch.no_grad():
        model.model.rope_deltas = None
        flat = model(input_ids=torch.tensor([ids]), pixel_values=im.pixels,
                     image_grid_thw=torch.tensor(im.grids), mm_token_type_ids=torch.zeros(1, len(ids), dtype=torch.int32),
                     use_cache=False).logits[0, -1].numpy()
    assert max_rel(logits[:1], flat[None]) > REL_TOL * 10, "text positions for image tokens went unnoticed"
    _, plain = engine_generate(engine_bin, m["gguf"], ids, 8, None, tmp_path)
    assert max_rel(plain[:1], logits[:1]) > REL_TOL * 10


def test_mtp_speculation_keeps_greedy_tokens(engine_bin, vlm, tmp_path, tiny_models):
    """The MTP head drafts at M-RoPE positions too; whatever it drafts, the tokens equal greedy decoding's."""
    m, model = vlm
    ids, picks = prompts(m["image_token_id"])["long"]
    im = Images(model, tmp_path, picks, "long")
    hf_tokens, _ = vo.hf_greedy(model, ids, im.pixels, im.grids, N_NEW)
    # The text config's random MTP head (the same text config, so it fits the trunk's shapes).
    mtp = tiny_models(vo.TEXT_CONFIG)["mtp_gguf"]
    cmd = [engine_bin, "generate", "--model", m["gguf"], "--prompt-ids", ",".join(map(str, ids)), "-n", str(N_NEW),
           "--ignore-eos", "--images", im.path, "--mtp", mtp, "--spec", "3"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.strip().split(",")] == hf_tokens


# ---- over the protocol ----------------------------------------------------------------------------------------

def serve(engine_bin, gguf, lines, *extra):
    r = subprocess.run([engine_bin, "--serve", "--vision", "--model", gguf, "--chunk", "7", *extra],
                       input="".join(line + "\n" for line in lines), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out, cur = [], None
    info = [line for line in r.stdout.splitlines() if line.startswith("INFO ")]
    for line in r.stdout.splitlines():
        if line.startswith("RESUME"):
            cur = {"resume": int(line.split()[1]), "tokens": []}
        elif line.startswith("T ") and cur is not None:
            cur["tokens"].append(int(line.split()[1]))
        elif line.startswith("DONE") and cur is not None:
            out.append(cur)
            cur = None
        elif line.startswith("ERR"):
            out.append({"err": line[4:]})
            cur = None
    return out, info


def geni(n, sve, ids):
    return f"GENI {n} {sve} {','.join(map(str, ids))}"


def gen(n, ids):
    return f"GEN {n} {','.join(map(str, ids))}"


def test_serve_geni_equals_transformers_and_errors(engine_bin, vlm, tmp_path):
    m, model = vlm
    image_id = m["image_token_id"]
    ps = prompts(image_id)
    one, one_picks = ps["one"]
    two, two_picks = ps["two"]
    im1 = Images(model, tmp_path, one_picks, "one")
    im2 = Images(model, tmp_path, two_picks, "two")
    hf_one = until_stop(vo.hf_greedy(model, one, im1.pixels, im1.grids, 12)[0])
    hf_two = until_stop(vo.hf_greedy(model, two, im2.pixels, im2.grids, 12)[0])
    rng = random.Random(5)
    plain = text(rng, 20)
    hf_plain = until_stop(vo.hf_greedy(model, plain, None, [], 12)[0])

    bad_magic = str(tmp_path / "bad-magic.sve")
    vo.write_sve(bad_magic, im1.feats, im1.grids, magic=b"SVE2")
    bad_width = str(tmp_path / "bad-width.sve")
    vo.write_sve(bad_width, [f[:, :32] for f in im1.feats], im1.grids)
    short = str(tmp_path / "short.sve")
    with open(im1.path, "rb") as f:
        data = f.read()
    with open(short, "wb") as f:
        f.write(data[:-8])
    swapped = [1, 2, vo.VISION_START] + [image_id] * 10 + [vo.VISION_END, 3, vo.VISION_START] + [image_id] * 12 + [4]
    lines = [
        geni(12, im1.path, one),
        geni(12, im1.path, two),                       # 2 runs, 1 image
        geni(12, im2.path, one),                       # 1 run, 2 images
        geni(12, im2.path, swapped),                   # 2 runs, 2 images, the run lengths the other way round
        geni(12, str(tmp_path / "missing.sve"), one),
        geni(12, bad_magic, one),
        geni(12, bad_width, one),
        geni(12, short, one),
        geni(12, im2.path, two),
        gen(12, plain),                                # text after images, same session
    ]
    got, info = serve(engine_bin, m["gguf"], lines)
    assert "INFO vision=1" in info
    assert len(got) == len(lines)
    assert got[0]["tokens"] == hf_one
    assert "2 <|image_pad|> runs" in got[1]["err"] and "holds 1 image" in got[1]["err"], got[1]
    assert "1 <|image_pad|> run" in got[2]["err"] and "holds 2 images" in got[2]["err"], got[2]
    assert "image 1:" in got[3]["err"] and "has 10 tokens" in got[3]["err"] and "has 12 rows" in got[3]["err"], got[3]
    assert "cannot read embeddings file" in got[4]["err"], got[4]
    assert "magic SVE1" in got[5]["err"], got[5]
    assert "n_embd 32" in got[6]["err"] and "hidden size is 64" in got[6]["err"], got[6]
    assert "needs" in got[7]["err"] and "bytes of rows" in got[7]["err"], got[7]
    assert got[8]["tokens"] == hf_two
    assert got[9]["tokens"] == hf_plain

    # A run whose length differs from the image's rows names both numbers.
    wrong = one[:6] + [vo.VISION_START] + [image_id] * 11 + one[6 + 13:]
    got, _ = serve(engine_bin, m["gguf"], [geni(4, im1.path, wrong), gen(4, plain)])
    assert "has 11 tokens" in got[0]["err"] and "has 12 rows (3 x 4)" in got[0]["err"], got[0]
    assert got[1]["tokens"] == hf_plain[:4]

    # Without --vision, GENI is refused as before.
    r = subprocess.run([engine_bin, "--serve", "--model", m["gguf"]], input=geni(4, im1.path, one) + "\n",
                       capture_output=True, text=True, timeout=120)
    assert "ERR GENI needs an engine started with --vision" in r.stdout


def test_follow_ups_reuse_only_the_same_picture(engine_bin, vlm, tmp_path):
    """Conversation prompts (turn starts, so checkpoints are taken): a follow-up with the same picture resumes after
    it; the same token ids with another picture never reuse the old picture's state (session or checkpoints, also
    after the other picture overwrote the KV rows); every answer equals transformers' for its own picture."""
    m, model = vlm
    image_id = m["image_token_id"]
    rng = random.Random(8)
    x = Images(model, tmp_path, [("A", 21)], "x")
    y = Images(model, tmp_path, [("A", 22)], "y")     # same grid, another picture
    head = [IM_START] + text(rng, 4) + [IM_START] + text(rng, 3) + image_tokens(GRIDS["A"], image_id) + text(rng, 5)
    p1 = head + [IM_START] + text(rng, 3)
    p2 = head + [IM_START] + text(rng, 4)             # regenerated last turn: resumes from the checkpoint
    start = head.index(image_id)

    def hf(ids, im):
        return until_stop(vo.hf_greedy(model, ids, im.pixels, im.grids, 10)[0])

    a1 = hf(p1, x)
    follow = p1 + a1[:-1] + [IM_START] + text(rng, 3) if a1[-1] in STOPS else p1 + a1 + [IM_START] + text(rng, 3)
    lines = [geni(10, x.path, p1), geni(10, x.path, follow), geni(10, x.path, p2), geni(10, y.path, p2),
             geni(10, x.path, p2), geni(10, y.path, follow)]
    got, _ = serve(engine_bin, m["gguf"], lines)
    assert [g.get("err") for g in got] == [None] * len(lines), got
    print("resumes", [g["resume"] for g in got], "image at", start, "head", len(head), "p1", len(p1),
          "answers", [len(g["tokens"]) for g in got])
    assert got[0]["resume"] == 0 and got[0]["tokens"] == a1
    assert got[1]["resume"] > len(p1) - 4, "the same picture: the follow-up resumes after the first prompt"
    assert got[1]["tokens"] == hf(follow, x)
    assert got[2]["resume"] == len(head), "the same picture: resumes from the checkpoint after it"
    assert got[2]["tokens"] == hf(p2, x)
    assert got[3]["resume"] <= start, f"another picture reused the old one's cache (resume {got[3]['resume']})"
    assert got[3]["tokens"] == hf(p2, y)
    # x's checkpoint is still kept, but y's rows now fill the KV cache: it must not be used.
    assert got[4]["resume"] <= start, f"a checkpoint whose KV rows hold another picture was used ({got[4]['resume']})"
    assert got[4]["tokens"] == hf(p2, x)
    assert got[5]["resume"] <= start
    assert got[5]["tokens"] == hf(follow, y)

    # A text prompt with the same placeholder ids (no images) after a GENI does not reuse the picture either.
    got, _ = serve(engine_bin, m["gguf"], [geni(10, x.path, p1), gen(10, p2)])
    assert got[1]["resume"] <= start
    assert got[1]["tokens"] == until_stop(vo.hf_greedy(model, p2, None, [], 10)[0])
