"""strata-vision (vision/) against transformers' Qwen4ExpVisionModel: a tiny random vision tower (every weight,
norm and bias randomised) saved as an HF checkpoint, converted with vision/convert_vision.py (f32, f16, bf16), run
through the real helper binary over its stdin/stdout protocol on PPM pictures of several sizes; the rows must equal
transformers' pooler_output on the same pixels (preprocessed by transformers' own image processor) within float
rounding. Also the ERR replies (missing file, not a PPM, wrong size, ...) and that the helper keeps serving."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from strata_testing import REPO, build_dir  # noqa: E402
from vision_tower import MEAN, STD, randomise, save_tower  # noqa: E402,F401

sys.path.insert(0, os.path.join(REPO, "vision"))
import convert_vision  # noqa: E402

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VISION = dict(depth=2, hidden_size=64, num_heads=4, intermediate_size=128, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=36, in_channels=3)
SIZES = [(64, 96), (128, 64), (32, 32), (160, 96)]   # (width, height): sides multiples of 32
TOL = 1e-4


def helper_path() -> str:
    return os.path.join(build_dir(), "vision", "strata-vision")


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def write_ppm(path, rgb: np.ndarray):
    h, w, _ = rgb.shape
    with open(path, "wb") as f:
        f.write(b"P6\n# written by test_vision_helper\n%d %d\n255\n" % (w, h))
        f.write(np.ascontiguousarray(rgb, dtype=np.uint8).tobytes())


def read_sve(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"SVE1"
    n, nx, ny, n_embd = struct.unpack("<4i", data[4:20])
    rows = np.frombuffer(data[20:], dtype="<f4")
    assert rows.size == n * n_embd
    return n, nx, ny, rows.reshape(n, n_embd)


class Helper:
    def __init__(self, model, threads=2, isa=None):
        exe = helper_path()
        if not os.path.exists(exe):
            pytest.fail(f"{exe} is missing: build it first (cmake -S . -B build && cmake --build build)")
        env = dict(os.environ)
        if isa:
            env["STRATA_ISA"] = isa
        self.p = subprocess.Popen([exe, "--model", model, "--threads", str(threads)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.ready = self.p.stdout.readline().strip()

    def ask(self, line: str) -> str:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self) -> int:
        try:
            self.p.stdin.write("QUIT\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass
        rc = self.p.wait(timeout=30)
        self.p.stdout.close()
        self.p.stderr.close()
        return rc


def make_tower(d, vision: dict, outtypes=("f32",), seed=0):
    """A random vision tower saved as an HF checkpoint dir under d/hf and converted; returns (model, hf, ggufs)."""
    model, hf = save_tower(d, vision, seed)
    ggufs = {}
    for i, outtype in enumerate(outtypes):
        ggufs[outtype] = str(d / f"vision-{outtype}.gguf")
        if i == 0:   # the command line once, the function (same code, no second torch import) for the rest
            r = subprocess.run([sys.executable, os.path.join(REPO, "vision", "convert_vision.py"), hf,
                                ggufs[outtype], "--outtype", outtype], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
        else:
            convert_vision.convert(hf, ggufs[outtype], outtype)
    return model, hf, ggufs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("vision")
    model, hf, ggufs = make_tower(d, VISION, ("f32", "f16", "bf16"))
    rng = np.random.default_rng(1)
    images = {}
    for w, h in SIZES:
        rgb = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        path = str(d / f"img-{w}x{h}.ppm")
        write_ppm(path, rgb)
        images[(w, h)] = (path, rgb)
    return dict(dir=d, hf=hf, model=model, gguf=ggufs, images=images)


def reference(model, hf_dir, rgb):
    """transformers: AutoImageProcessor of the checkpoint on the RGB array, then the vision model's pooler_output."""
    from transformers import AutoImageProcessor
    proc = AutoImageProcessor.from_pretrained(hf_dir)
    assert type(proc).__name__.startswith("Qwen2VLImageProcessor")
    inputs = proc(images=[rgb], return_tensors="pt")
    with torch.no_grad():
        out = model(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
    return out.pooler_output.numpy(), inputs["image_grid_thw"][0].tolist()


def rounded_model(model, outtype):
    """A copy whose 2-D weights (the ones the converter stores in outtype) are rounded to f16 / bf16."""
    import copy
    m = copy.deepcopy(model)
    dt = torch.float16 if outtype == "f16" else torch.bfloat16
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim > 1:
                p.copy_(p.to(dt).float())
    return m


def test_gguf_metadata(tiny):
    import gguf
    r = gguf.GGUFReader(tiny["gguf"]["f32"])
    kv = {f.name: f for f in r.fields.values()}
    assert bytes(kv["general.architecture"].parts[-1]).decode() == "qwen4exp-vision"
    mean = [float(kv["vision.image_mean"].parts[i][0]) for i in kv["vision.image_mean"].data]
    assert np.allclose(mean, MEAN)
    assert int(kv["vision.max_pixels"].parts[-1][0]) == 256 * 256
    names = {t.name: t for t in r.tensors}
    assert len(names) == 3 + 12 * VISION["depth"] + 6
    assert list(names["v.patch_embd.weight"].shape) == [3 * 2 * 16 * 16, 64]
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(tiny["gguf"]["bf16"]).tensors}
    assert types["v.blk.0.attn_qkv.weight"] == "BF16" and types["v.blk.0.attn_qkv.bias"] == "F32"


def test_processor_defaults_without_preprocessor_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen4_exp", "vision_config": VISION}))
    vc = convert_vision.read_vision_config(str(tmp_path))
    pc = convert_vision.read_processor_config(str(tmp_path), vc)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as P
    assert pc["image_mean"] == list(P.image_mean) and pc["image_std"] == list(P.image_std)
    assert pc["min_pixels"] == P.size["shortest_edge"] and pc["max_pixels"] == P.size["longest_edge"]
    assert vc["rope_theta"] == 10000.0


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_rows_equal_transformers_f32(tiny, isa):
    h = Helper(tiny["gguf"]["f32"], isa=isa)
    try:
        assert h.ready == f"READY {VISION['out_hidden_size']}"
        for (w, hgt), (path, rgb) in tiny["images"].items():
            out = str(tiny["dir"] / f"out-{w}x{hgt}.sve")
            reply = h.ask(f"ENC {path} {out}").split()
            ref, (t, gh, gw) = reference(tiny["model"], tiny["hf"], rgb)
            assert (t, gh, gw) == (1, hgt // 16, w // 16)
            nx, ny = gw // 2, gh // 2
            assert reply[0] == "OK" and reply[1:4] == [str(nx * ny), str(nx), str(ny)], reply
            assert float(reply[4]) >= 0
            n, fnx, fny, rows = read_sve(out)
            assert (n, fnx, fny) == (nx * ny, nx, ny)
            d = rel_diff(rows, ref)
            print(f"f32 {isa} {w}x{hgt}: {n} rows, max rel diff {d:.2e}")
            assert d < TOL, f"{w}x{hgt}: max relative difference {d}"
    finally:
        assert h.close() == 0


@pytest.mark.parametrize("outtype", ["f16", "bf16"])
def test_rows_equal_transformers_half(tiny, outtype):
    h = Helper(tiny["gguf"][outtype], threads=1)
    try:
        model = rounded_model(tiny["model"], outtype)
        for size in [(64, 96), (128, 64)]:
            path, rgb = tiny["images"][size]
            out = str(tiny["dir"] / f"out-{outtype}.sve")
            assert h.ask(f"ENC {path} {out}").startswith("OK ")
            ref, _ = reference(model, tiny["hf"], rgb)
            d = rel_diff(read_sve(out)[3], ref)
            print(f"{outtype} {size}: max rel diff {d:.2e}")
            assert d < TOL
    finally:
        assert h.close() == 0


def test_errors_and_keeps_serving(tiny):
    d = tiny["dir"]
    good, _ = tiny["images"][(64, 96)]
    out = str(d / "out-err.sve")
    text = d / "not.ppm"
    text.write_text("hello, this is not a picture\n")
    pgm = d / "gray.pgm"
    pgm.write_bytes(b"P5\n32 32\n255\n" + bytes(32 * 32))
    write_ppm(str(d / "odd.ppm"), np.zeros((64, 48, 3), np.uint8))     # 48 wide: not a multiple of 32
    trunc = d / "trunc.ppm"
    trunc.write_bytes(b"P6\n32 32\n255\n" + bytes(100))
    write_ppm(str(d / "big.ppm"), np.zeros((256, 288, 3), np.uint8))   # 73,728 pixels > max_pixels 65,536
    deep = d / "deep.ppm"
    deep.write_bytes(b"P6\n32 32\n65535\n" + bytes(32 * 32 * 6))
    h = Helper(tiny["gguf"]["f32"])
    try:
        cases = [
            (f"ENC {d}/missing.ppm {out}", "cannot open image"),
            (f"ENC {text} {out}", "not a binary PPM"),
            (f"ENC {pgm} {out}", "not a binary PPM"),
            (f"ENC {d}/odd.ppm {out}", "multiples of 32"),
            (f"ENC {trunc} {out}", "truncated"),
            (f"ENC {d}/big.ppm {out}", "max_pixels"),
            (f"ENC {deep} {out}", "maxval"),
            (f"ENC {good} {d}/no/such/dir/out.sve", "cannot write"),
            (f"ENC {good}", "ENC needs"),
            ("HELLO", "unknown command"),
            (f'ENC "{good} {out}', "unterminated quote"),
            ("", None),   # a blank line is ignored: no reply
        ]
        for line, want in cases:
            if want is None:
                h.p.stdin.write(line + "\n")
            else:
                reply = h.ask(line)
                assert reply.startswith("ERR ") and want in reply, (line, reply)
            ok = h.ask(f"ENC {good} {out}")
            assert ok.startswith("OK 6 2 3 "), (line, ok)
        # paths with spaces, double-quoted
        spaced = d / "a dir with spaces"
        spaced.mkdir()
        write_ppm(str(spaced / "pic 1.ppm"), tiny["images"][(64, 96)][1])
        reply = h.ask(f'ENC "{spaced}/pic 1.ppm" "{spaced}/out 1.sve"')
        assert reply.startswith("OK 6 2 3 "), reply
        assert np.array_equal(read_sve(str(spaced / "out 1.sve"))[3], read_sve(out)[3])
    finally:
        assert h.close() == 0


def test_bad_model_reports_ready_zero(tmp_path):
    import gguf
    path = str(tmp_path / "other.gguf")
    w = gguf.GGUFWriter(path, "qwen4exp")
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    exe = helper_path()
    if not os.path.exists(exe):
        pytest.fail(f"{exe} is missing")
    r = subprocess.run([exe, "--model", path], input="", capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stdout.strip() == "READY 0"
    assert "not a strata vision GGUF" in r.stderr
    r = subprocess.run([exe, "--model", str(tmp_path / "missing.gguf")], input="", capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and r.stdout.strip() == "READY 0"


def test_info(tiny):
    r = subprocess.run([helper_path(), "--model", tiny["gguf"]["bf16"], "--info"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    kv = dict(line.split("=", 1) for line in r.stdout.split())
    assert kv["n_embd"] == "64" and kv["factor"] == "32"
    assert kv["min_pixels"] == str(32 * 32) and kv["max_pixels"] == str(256 * 256)
    assert np.allclose([float(v) for v in kv["image_std"].split(",")], STD)


@pytest.mark.parametrize("isa", ["scalar", "avx512"])
def test_real_head_dim(tmp_path, isa):
    """The real tower's head dim (72 = 1152 / 16: 18 rotary frequencies per axis, kernel tails) on a 2-head tower."""
    vision = dict(VISION, hidden_size=144, num_heads=2, intermediate_size=96, out_hidden_size=48, depth=1,
                  num_position_embeddings=16)
    model, hf, ggufs = make_tower(tmp_path, vision, seed=3)
    rgb = np.random.default_rng(5).integers(0, 256, size=(64, 160, 3), dtype=np.uint8)
    write_ppm(str(tmp_path / "p.ppm"), rgb)
    h = Helper(ggufs["f32"], isa=isa)
    try:
        assert h.ready == "READY 48"
        assert h.ask(f"ENC {tmp_path}/p.ppm {tmp_path}/o.sve").startswith("OK 10 5 2 ")
        ref, _ = reference(model, hf, rgb)
        d = rel_diff(read_sve(str(tmp_path / "o.sve"))[3], ref)
        print(f"head dim 72 {isa}: max rel diff {d:.2e}")
        assert d < TOL
    finally:
        assert h.close() == 0


def smart_resize(height, width, factor=32, min_pixels=56 * 56, max_pixels=28 * 28 * 1280):
    """The resize rule as vision/README.md gives it to the gateway."""
    import math
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def test_gateway_resize_rule_matches_processor(tiny):
    """A picture of any size, resized the README's way (smart_resize + Pillow BICUBIC, alpha onto white) and sent as
    PPM, gives the rows transformers gives for the original picture with its own resizing."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize
    for h, w in [(75, 100), (20, 30), (300, 301), (1000, 40), (33, 31), (480, 640), (5000, 4000)]:
        for mn, mx in [(56 * 56, 28 * 28 * 1280), (32 * 32, 256 * 256), (65536, 16777216)]:
            assert smart_resize(h, w, 32, mn, mx) == hf_smart_resize(h, w, 32, mn, mx), (h, w, mn, mx)
    rng = np.random.default_rng(7)
    h = Helper(tiny["gguf"]["f32"])
    try:
        for (hh, ww), mode in [((75, 100), "RGB"), ((41, 150), "RGBA"), ((300, 200), "RGB")]:
            arr = rng.integers(0, 256, size=(hh, ww, len(mode)), dtype=np.uint8)
            pic = Image.fromarray(arr, mode)
            # the gateway's side
            rgb = pic
            if "A" in pic.getbands():
                bg = Image.new("RGBA", pic.size, (255, 255, 255, 255))
                rgb = Image.alpha_composite(bg, pic.convert("RGBA"))
            rgb = rgb.convert("RGB")
            th, tw = smart_resize(hh, ww, 32, 32 * 32, 256 * 256)
            rgb = rgb.resize((tw, th), Image.BICUBIC)
            path = str(tiny["dir"] / f"gw-{ww}x{hh}.ppm")
            rgb.save(path, "PPM")
            out = str(tiny["dir"] / "gw.sve")
            reply = h.ask(f"ENC {path} {out}")
            assert reply.startswith(f"OK {(th // 32) * (tw // 32)} {tw // 32} {th // 32} "), reply
            # transformers' side: the original picture through the checkpoint's processor (resize included)
            from transformers import AutoImageProcessor
            proc = AutoImageProcessor.from_pretrained(tiny["hf"])
            inputs = proc(images=[pic], return_tensors="pt")
            assert inputs["image_grid_thw"][0].tolist() == [1, th // 16, tw // 16]
            with torch.no_grad():
                ref = tiny["model"](inputs["pixel_values"], grid_thw=inputs["image_grid_thw"]).pooler_output.numpy()
            d = rel_diff(read_sve(out)[3], ref)
            print(f"gateway resize {ww}x{hh} {mode} -> {tw}x{th}: max rel diff {d:.2e}")
            assert d < TOL
    finally:
        assert h.close() == 0


def test_converter_prefixes_and_errors(tiny, tmp_path):
    """A bare Qwen4ExpVisionModel save (config model_type qwen4_exp_vision, unprefixed names) converts to the same
    tensors as the model.visual.* checkpoint; a checkpoint without the tower is a clear error."""
    import gguf
    from safetensors.torch import save_file
    bare = tmp_path / "bare"
    bare.mkdir()
    tiny["model"].config.save_pretrained(bare)
    save_file({k: v.contiguous() for k, v in tiny["model"].state_dict().items()}, str(bare / "model.safetensors"))
    out = str(tmp_path / "bare.gguf")
    convert_vision.convert(str(bare), out, "f32")
    a = {t.name: np.array(t.data) for t in gguf.GGUFReader(out).tensors}
    b = {t.name: np.array(t.data) for t in gguf.GGUFReader(tiny["gguf"]["f32"]).tensors}
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps({"model_type": "qwen4_exp", "vision_config": VISION}))
    save_file({"model.language_model.embed_tokens.weight": torch.zeros(4, 4)}, str(empty / "model.safetensors"))
    r = subprocess.run([sys.executable, os.path.join(REPO, "vision", "convert_vision.py"), str(empty),
                        str(tmp_path / "x.gguf")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no vision tower" in r.stderr
