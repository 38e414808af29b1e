# The v3 demo model's layer kinds (QSA attention at 3, 5 and 7, no interval pattern) survive conversion: the GGUF
# carries attention.recurrent_layers, and our engine's greedy tokens (plain and MTP-speculated) equal transformers'.
# train.py --init-from loads a checkpoint's model and MTP weights, and refuses one of another config.
import subprocess
import sys

import gguf
import pytest
import torch

from demo_model import evaluate_hf, qsa_indexer, train
from demo_model.evaluate import STOP_IDS
from demo_model.model_config import ATTENTION_LAYERS, DEMO, TINY
from strata_testing import TOOLS

# TINY's sizes with v3's layer kinds and a dense QSA budget (greedy ties of a sparse random selection are not the
# point here; tests/demo_model/test_qsa_indexer.py covers the selection).
SIZES = dict(TINY, indexer_budget=2048)
PROMPTS = [[1, 872, 198, 1415, 2, 1, 77, 198], [1, 872, 198] + list(range(300, 340)) + [2, 1, 77, 198]]


def engine_tokens(engine_bin, gguf_path, prompt, count, *extra):
    run = subprocess.run([engine_bin, "generate", "--model", gguf_path, "--prompt-ids", ",".join(map(str, prompt)),
                          "-n", str(count), "--threads", "2", "--ignore-eos", *extra],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-500:]
    return [int(t) for t in run.stdout.strip().splitlines()[0].split(",")]


def until_stop(tokens):
    return tokens[:next((i + 1 for i, t in enumerate(tokens) if t in STOP_IDS), len(tokens))]


@pytest.fixture(scope="module")
def v3_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("v3") / "ckpt"
    model, head = train.build(SIZES, 2048, "cpu", 5)
    train.save_checkpoint(model, head, out)
    return out


def test_demo_config_has_three_attention_layers():
    assert [i for i, kind in enumerate(DEMO["layer_types"]) if kind != "linear_attention"] == [3, 5, 7]
    assert ATTENTION_LAYERS == (3, 5, 7) and SIZES["layer_types"] == DEMO["layer_types"]


def test_v3_layers_convert_and_engine_matches_transformers(engine_bin, v3_checkpoint, tmp_path):
    from transformers import Qwen4ExpForCausalLM
    main, mtp = str(tmp_path / "v3.gguf"), str(tmp_path / "v3-mtp.gguf")
    run = subprocess.run([sys.executable, str(TOOLS / "convert.py"), str(v3_checkpoint), main, "--outtype", "f16",
                          "--mtp-out", mtp], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-800:]
    for path, blocks in ((main, 8), (mtp, 9)):
        field = gguf.GGUFReader(path).fields["qwen4exp.attention.recurrent_layers"]
        recurrent = [bool(field.parts[i][0]) for i in field.data]
        assert recurrent == [i not in ATTENTION_LAYERS and i < 8 for i in range(blocks)], (path, recurrent)

    qsa_indexer.patch_qsa_indexer()
    model = Qwen4ExpForCausalLM.from_pretrained(v3_checkpoint, dtype=torch.float32).eval()
    for prompt in PROMPTS:
        expected = evaluate_hf.greedy(model, [prompt], "cpu", max_new_tokens=12, batch_size=1)[0]
        assert len(expected) >= 4, expected  # transformers stops after a stop token (kept): the engine must too
        assert until_stop(engine_tokens(engine_bin, main, prompt, 12)) == expected
        assert until_stop(engine_tokens(engine_bin, main, prompt, 12, "--mtp", mtp, "--spec", "3")) == expected


def test_init_from_loads_model_and_mtp_weights(v3_checkpoint):
    model, head = train.build(SIZES, 2048, "cpu", 6)  # another seed: other weights until loaded
    saved, _ = train.build(SIZES, 2048, "cpu", 5)
    assert not torch.equal(model.lm_head.weight, saved.lm_head.weight)
    train.load_checkpoint(model, head, v3_checkpoint)
    with torch.no_grad():
        for name, value in saved.state_dict().items():
            expected = value.half().float() if value.is_floating_point() else value  # the checkpoint is fp16
            assert torch.equal(model.state_dict()[name], expected), name
    from safetensors.torch import load_file
    for name, value in load_file(str(v3_checkpoint / "mtp.safetensors")).items():
        assert torch.equal(head.state_dict()[name.removeprefix("mtp.")], value.float()), name


def test_init_from_refuses_another_config(v3_checkpoint):
    model, head = train.build(dict(SIZES, layer_types=["linear_attention"] * 3 + ["indexed_attention"]
                                   + ["linear_attention"] * 3 + ["indexed_attention"]), 2048, "cpu", 6)
    with pytest.raises(ValueError, match="layer_types"):
        train.load_checkpoint(model, head, v3_checkpoint)
