# The header-only description of the real 48-layer model (1224 tensors, GGUF.md §2.8; 34 in the MTP file) and
# the converter's refusals for what llama.cpp's format cannot express.
import json
import re
import os
import shutil
import subprocess
import sys

import pytest

import convert
import gguf_layout
from strata_testing import TOOLS, tiny


def test_real_model_has_1224_tensors():
    hp = gguf_layout.hparams_from_config(gguf_layout.real_model_config())
    specs = dict(gguf_layout.main_tensor_specs(hp))
    assert len(specs) == 1224
    assert specs["per_layer_token_embd.weight"] == (160, 320001536)
    assert specs["blk.1.ple_key.weight"] == (2560, 10240)
    assert specs["blk.0.attn_qkv.weight"] == (2560, 10240)
    assert specs["blk.0.ssm_out.weight"] == (6144, 2560)
    assert specs["blk.3.attn_q.weight"] == (2560, 12288)
    assert specs["blk.3.indexer.q_proj.weight"] == (2560, 512)
    assert specs["blk.3.indexer.k_proj.weight"] == (2560, 128)
    assert specs["blk.47.ffn_down_exps.weight"] == (640, 2560, 512)
    assert specs["output_hc_up.weight"] == (320, 10240)
    assert hp.n_rot == 64 and hp.ple_rows == 320001536 and hp.mrope_sections == [11, 11, 10, 0]
    assert sum(1 for n in specs if n.startswith("blk.")) == 16 * 48 + 9 * 36 + 10 * 12 + 6
    mtp = dict(gguf_layout.mtp_tensor_specs(hp))
    assert len(mtp) == 34
    assert mtp["blk.48.nextn.eh_proj.weight"] == (5120, 2560)
    assert mtp["blk.48.nextn.hnorm.weight"] == (10240,)


def test_describe_cli_prints_the_count():
    out = subprocess.run([sys.executable, str(TOOLS / "gguf_layout.py")], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("1224 tensors")


def _copy_with_config(tmp_path, **changes):
    src = tiny("tiny")["hf_dir"]
    dst = tmp_path / "hf"
    shutil.copytree(src, dst)
    with open(dst / "config.json") as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(dst / "config.json", "w") as f:
        json.dump(cfg, f)
    return str(dst)


REFUSALS = [
    (dict(ple_layer_ids=[1, 2]), "exactly one PLE layer"),
    (dict(ple_layer_ids=[4]), "is not a linear_attention layer"),
    (dict(linear_value_head_dim=32), "linear_key_head_dim=16 != linear_value_head_dim=32"),
    (dict(indexer_kv_heads=2), "indexer_kv_heads=2"),
    (dict(indexer_compress_ratio=[4, 8]), "differs across layers"),
    (dict(output_gate_type="silu"), "sigmoid"),
    (dict(eos_token_id=None), "eos_token_id must be set"),
]


@pytest.mark.parametrize("changes,message", REFUSALS)
def test_refusals(tmp_path, changes, message):
    hf = _copy_with_config(tmp_path, **changes)
    with pytest.raises(convert.ConvertError, match=re.escape(message)):
        convert.convert(hf, str(tmp_path / "out.gguf"), "f32")
    assert not os.path.exists(tmp_path / "out.gguf")


def test_cli_refusal_exit_code_and_message(tmp_path):
    hf = _copy_with_config(tmp_path, ple_layer_ids=[1, 2])
    r = subprocess.run([sys.executable, str(TOOLS / "convert.py"), hf, str(tmp_path / "o.gguf"), "--outtype", "f32"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "error: ple_layer_ids=[1, 2]: llama.cpp supports exactly one PLE layer" in r.stderr


def test_mismatched_rotary_factor_warns(tmp_path, capsys):
    hf = _copy_with_config(tmp_path, partial_rotary_factor=0.5)
    r = convert.convert(hf, str(tmp_path / "out.gguf"), "f32")
    assert any("partial_rotary_factor" in w for w in r["warnings"])
    assert "partial_rotary_factor" in capsys.readouterr().err
