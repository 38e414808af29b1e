"""Corrupt, truncated and inconsistent GGUF files: each gives its own clear error from `strata info` and
`strata generate` (exit code 1, a message naming the problem), never a crash. CI runs this suite against the
AddressSanitizer/UBSan build too (STRATA_BUILD=build-asan)."""
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter


@pytest.fixture(scope="module")
def good(tiny_models):
    return tiny_models("tiny")["gguf"]["f32"]


def run(engine_bin, *args):
    r = subprocess.run([engine_bin, *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr


def expect_error(engine_bin, path, *fragments):
    for cmd in (["info", path], ["generate", "--model", path, "--prompt-ids", "1,2", "-n", "1"]):
        code, err = run(engine_bin, *cmd)
        assert code == 1, f"{cmd[0]}: expected a clean error (exit 1), got exit {code}: {err[-2000:]}"
        assert "AddressSanitizer" not in err and "runtime error" not in err, err[-3000:]
        for frag in fragments:
            assert frag in err, f"{cmd[0]}: message should mention {frag!r}: {err.strip()}"


def rewrite(src, dst, drop_keys=(), set_keys=None, drop_tensors=(), reshape=None, **writer_args):
    """Copies a GGUF with edits, through gguf-py's reader and writer (writer_args: split options)."""
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch, **writer_args)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in drop_keys:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub_type=sub)
    for key, (value, vtype) in (set_keys or {}).items():
        w.add_key_value(key, value, vtype)
    for t in r.tensors:
        if t.name in drop_tensors:
            continue
        data = np.array(t.data)
        shape = list(reversed([int(x) for x in t.shape]))
        if reshape and t.name in reshape:
            shape = reshape[t.name]
            data = np.resize(data, int(np.prod(shape)))
        w.add_tensor(t.name, data.reshape(shape), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_good_file_loads(engine_bin, good):
    code, err = run(engine_bin, "info", good)
    assert code == 0, err


def test_wrong_magic(engine_bin, good, tmp_path):
    p = str(tmp_path / "magic.gguf")
    shutil.copy(good, p)
    with open(p, "r+b") as f:
        f.write(b"GGML")
    expect_error(engine_bin, p, "not a GGUF file")


def test_wrong_version(engine_bin, good, tmp_path):
    p = str(tmp_path / "version.gguf")
    shutil.copy(good, p)
    with open(p, "r+b") as f:
        f.seek(4)
        f.write(struct.pack("<I", 7))
    expect_error(engine_bin, p, "unsupported GGUF version 7")


@pytest.mark.parametrize("keep", [10, 300, 4000])
def test_truncated_header(engine_bin, good, tmp_path, keep):
    p = str(tmp_path / f"head{keep}.gguf")
    with open(good, "rb") as f:
        data = f.read(keep)
    open(p, "wb").write(data)
    expect_error(engine_bin, p, "truncated header")


def test_truncated_data(engine_bin, good, tmp_path):
    p = str(tmp_path / "data.gguf")
    data = open(good, "rb").read()
    open(p, "wb").write(data[: len(data) - 1000])
    expect_error(engine_bin, p, "runs past the end of the file")


def test_tensor_offset_past_end(engine_bin, good, tmp_path):
    p = str(tmp_path / "offset.gguf")
    shutil.copy(good, p)
    r = GGUFReader(good)
    t = r.tensors[-1]
    off_field = t.field.parts[-1]            # the u64 data offset of the last tensor info
    pos = t.field.offset + sum(part.nbytes for part in t.field.parts[:-1])
    with open(p, "r+b") as f:
        f.seek(pos)
        f.write(struct.pack("<Q", int(off_field[0]) + (1 << 30)))
    expect_error(engine_bin, p, t.name, "runs past the end")


def test_unknown_ggml_type(engine_bin, good, tmp_path):
    p = str(tmp_path / "type.gguf")
    shutil.copy(good, p)
    t = GGUFReader(good).tensors[3]
    pos = t.field.offset + sum(part.nbytes for part in t.field.parts[:-2])   # the u32 type before the offset
    with open(p, "r+b") as f:
        f.seek(pos)
        f.write(struct.pack("<I", 77))
    expect_error(engine_bin, p, t.name, "unknown ggml type 77")


def test_missing_key(engine_bin, good, tmp_path):
    p = str(tmp_path / "nokey.gguf")
    rewrite(good, p, drop_keys={"qwen4exp.ssm.group_count"})
    expect_error(engine_bin, p, "missing required metadata key qwen4exp.ssm.group_count")


def test_zero_hyperparameter(engine_bin, good, tmp_path):
    p = str(tmp_path / "zero.gguf")
    rewrite(good, p, drop_keys={"qwen4exp.hyper_connection.count"},
            set_keys={"qwen4exp.hyper_connection.count": (1, GGUFValueType.UINT32)})
    expect_error(engine_bin, p, "hyper_connection.count must be > 1")


def test_missing_tensor(engine_bin, good, tmp_path):
    p = str(tmp_path / "notensor.gguf")
    rewrite(good, p, drop_tensors={"blk.1.ssm_out.weight"})
    code, err = run(engine_bin, "generate", "--model", p, "--prompt-ids", "1,2", "-n", "1")
    assert code == 1 and "missing required tensor blk.1.ssm_out.weight" in err, err


def test_shape_disagrees_with_hparams(engine_bin, good, tmp_path):
    p = str(tmp_path / "shape.gguf")
    rewrite(good, p, reshape={"blk.0.attn_gate.weight": [60, 64]})
    code, err = run(engine_bin, "generate", "--model", p, "--prompt-ids", "1,2", "-n", "1")
    assert code == 1 and "blk.0.attn_gate.weight has shape {64, 60}, expected {64, 64}" in err, err


def test_not_a_file(engine_bin, tmp_path):
    code, err = run(engine_bin, "info", str(tmp_path / "absent.gguf"))
    assert code == 1 and "cannot open" in err
