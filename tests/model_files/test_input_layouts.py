# Other checkpoint layouts convert to the same GGUF: VLM config (text_config), `model.language_model.` prefix,
# fused experts, sharded safetensors with an index, PLE shards stored out of file order or as one table.
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import convert
from strata_testing import tiny
from gguf_read import GGUFFile


def _restructure(sd: dict, E: int, ple_whole: bool) -> dict:
    out = {}
    for k, v in sd.items():
        if k.startswith("model."):
            k = "model.language_model." + k[len("model."):]
        out[k] = v
    for k in [k for k in out if k.endswith(".experts.0.gate_proj.weight")]:
        p = k[:-len("0.gate_proj.weight")]
        gu = torch.stack([torch.cat([out.pop(f"{p}{e}.gate_proj.weight"), out.pop(f"{p}{e}.up_proj.weight")])
                          for e in range(E)])
        down = torch.stack([out.pop(f"{p}{e}.down_proj.weight") for e in range(E)])
        out[p + "gate_up_proj"], out[p + "down_proj"] = gu, down
    if ple_whole:
        shards = sorted((k for k in out if ".shard_" in k), key=lambda k: int(k.split(".shard_")[1].split(".")[0]))
        table = torch.cat([out.pop(k) for k in shards])
        out[shards[0].split(".shard_")[0] + ".weight"] = table
    return out


@pytest.mark.parametrize("ple_whole", [False, True])
def test_other_layouts_give_the_same_file(tmp_path, ple_whole):
    m = tiny("tiny")
    src = m["hf_dir"]
    dst = tmp_path / "vlm"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors"))
    with open(dst / "config.json") as f:
        text = json.load(f)
    root = {"model_type": "qwen4_exp", "architectures": ["Qwen4ExpForConditionalGeneration"],
            "image_token_id": text.pop("image_token_id"), "text_config": text}
    with open(dst / "config.json", "w") as f:
        json.dump(root, f)
    sd = _restructure(load_file(f"{src}/model.safetensors"), text["num_experts"], ple_whole)
    # two files; PLE shards 2,3 in the first file and 0,1 in the second (ascending shard index must win)
    names = sorted(sd)
    first = [n for n in names if ".shard_2" in n or ".shard_3" in n
             or (".shard_" not in n and n < "model.language_model.layers.2")]
    assert ple_whole or any(".shard_0" in n for n in names if n not in first)
    files = {"model-00001-of-00002.safetensors": first,
             "model-00002-of-00002.safetensors": [n for n in names if n not in first]}
    weight_map = {}
    for fn, keys in files.items():
        save_file({k: sd[k].contiguous() for k in keys}, str(dst / fn), metadata={"format": "pt"})
        weight_map.update({k: fn for k in keys})
    with open(dst / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)

    out, mtp = tmp_path / "o.gguf", tmp_path / "mtp.gguf"
    convert.convert(str(dst), str(out), "f32", str(mtp), name="strata-tiny")
    for new_path, old_path in ((out, m["gguf"]["f32"]), (mtp, m["mtp_gguf"])):
        new, old = GGUFFile(str(new_path)), GGUFFile(old_path)
        assert {k: v for k, v in new.fields.items() if k != "general.name"} == \
               {k: v for k, v in old.fields.items() if k != "general.name"}
        assert list(new.tensors) == list(old.tensors)
        for name in old.tensors:
            assert np.array_equal(new.tensor_f32(name), old.tensor_f32(name)), name
