# The MTP head from the original checkpoint: the tiny model's HF checkpoint re-sharded and served by the Hub-like
# server; only the mtp.* byte ranges are fetched (merged, resumable after kill -9, refused without Range support),
# the GGUF it makes drafts exactly like make_tiny's MTP GGUF, and the installer adds --mtp to the run config when
# asked to speculate (--speculate).
import functools
import http.server
import json
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from installer_helpers import PROJECT_DIR, half_on_disk, installer_env, wait_for

sys.path.insert(0, str(PROJECT_DIR / "tests"))
from strata_testing import engine_path, run_generate, tiny  # noqa: E402  (also puts engine/tools on sys.path)

import mtp_extract  # noqa: E402
from gguf_read import GGUFFile  # noqa: E402
from installer.mtp_fetch import MtpFetchError  # noqa: E402
from installer.mtp_head import MtpSource, make_mtp_head  # noqa: E402

CKPT_REPO = "test-org/Tiny-HF"
GGUF_REPO = "test-org/Tiny-GGUF"
N_SHARDS = 4            # the last shard holds no needed tensor and must never be read
PROMPT = [int(x) for x in np.random.default_rng(3).integers(0, 500, 40)]
NO_TORCH = "import runpy, sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None; " \
           "runpy.run_module('installer.mtp_head', run_name='__main__')"


def write_safetensors(path: Path, tensors: list) -> None:
    """[(key, dtype, shape, raw bytes)] in this order (safetensors' own writer would sort them by name)."""
    header, offset = {}, 0
    for key, dtype, shape, raw in tensors:
        header[key] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for *_, raw in tensors:
            f.write(raw)


def reshard(hf_dir: Path, repo_dir: Path) -> dict:
    """The tiny checkpoint as N_SHARDS shards + index: the mtp.* tensors span shards 1-2 in long runs with a few
    other tensors swapped in between (so some ranges merge and some do not); the last shard holds none of them."""
    source = hf_dir / "model.safetensors"
    entries = mtp_extract.read_local_header(str(source))
    data = source.read_bytes()
    mtp = sorted(k for k in entries if k.startswith("mtp."))
    others = sorted(k for k in entries if not k.startswith("mtp."))
    last_shard = [k for k in others[1::5] if "ple_embedding.layer" not in k and "ngram_heads" not in k]
    others = [k for k in others if k not in last_shard]
    order = others[:60] + mtp + others[60:]
    rng = random.Random(5)
    for _ in range(6):
        i, j = rng.randrange(len(order)), rng.randrange(len(order))
        order[i], order[j] = order[j], order[i]
    third = -(-len(order) // (N_SHARDS - 1))
    groups = [order[i:i + third] for i in range(0, len(order), third)] + [last_shard]
    shards = {f"model-{i + 1:05d}-of-{N_SHARDS:05d}.safetensors": [
        (k, entries[k].dtype, entries[k].shape, data[entries[k].start:entries[k].end]) for k in group]
        for i, group in enumerate(groups)}
    repo_dir.mkdir(parents=True)
    for name, tensors in shards.items():
        write_safetensors(repo_dir / name, tensors)
    weight_map = {key: name for name, tensors in shards.items() for key, *_ in tensors}
    (repo_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    for name in ("config.json", "generation_config.json"):
        (repo_dir / name).write_bytes((hf_dir / name).read_bytes())
    return entries


@pytest.fixture(scope="module")
def model():
    return tiny("tiny")


@pytest.fixture
def ckpt(hub, model):
    """The re-sharded checkpoint in the hub; returns the needed tensors' bytes (mtp.* and the PLE constants)."""
    entries = reshard(Path(model["hf_dir"]), hub.repo_dir.parent / CKPT_REPO.split("/")[1])
    hp = mtp_extract.load_hparams(model["hf_dir"])
    return sum(e.nbytes for k, e in entries.items() if mtp_extract.is_needed(mtp_extract.canonical_name(k), hp))


def shard_gets(hub) -> list[dict]:
    return [r for r in hub.state.requests if r["method"] == "GET" and f"{CKPT_REPO}/resolve/" in r["path"]
            and r["path"].endswith(".safetensors")]


def range_bytes(r: dict) -> int:
    first, last = r["range"][len("bytes="):].split("-")
    return int(last) - int(first) + 1


def piece_gets(hub) -> list[dict]:
    """The tensor-data requests (not the two header reads of each shard)."""
    return [r for r in shard_gets(hub) if r["range"] != "bytes=0-7" and not r["range"].startswith("bytes=8-")]


def draft_logits(model_gguf: str, mtp_gguf: Path | str, out: Path) -> np.ndarray:
    run_generate(engine_path(), model_gguf, PROMPT, 1, "--mtp", str(mtp_gguf), "--mtp-logits-out", str(out))
    return np.fromfile(out, dtype=np.float32)


def make_head(hub, out: Path, outtype: str, monkeypatch, main_gguf=None) -> list[str]:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    said = []
    make_mtp_head(MtpSource(CKPT_REPO, None), out, outtype, main_gguf, say=said.append)
    return said


@pytest.mark.parametrize("outtype, reference, tolerance", [("f32", "f32", 0.0), ("q8_0", "q8_0", 0.0),
                                                           ("bf16", "f32", 1e-2)])
def test_only_mtp_ranges_are_fetched_and_the_head_drafts_like_make_tiny(hub, ckpt, model, tmp_path, monkeypatch,
                                                                          outtype, reference, tolerance):
    out = tmp_path / "models" / f"tiny-MTP-{outtype}.gguf"
    out.parent.mkdir()
    make_head(hub, out, outtype, monkeypatch, Path(model["gguf"]["f32"]))
    gets = shard_gets(hub)
    assert all(r["range"] and not r["range"].endswith("-") for r in gets), "a GET without a closed byte range"
    assert not any(r["path"].endswith(f"-{N_SHARDS:05d}-of-{N_SHARDS:05d}.safetensors") for r in gets)
    pieces = piece_gets(hub)
    assert sum(range_bytes(r) for r in pieces) == ckpt        # exactly the needed bytes, each once
    assert 3 <= len(pieces) < 60, f"{len(pieces)} range requests for 62 tensors: adjacent ranges not merged?"
    assert not list(out.parent.glob("*.parts-*")), "the fetched pieces should be removed after the conversion"

    main = model["gguf"]["f32"]
    plain = run_generate(engine_path(), main, PROMPT, 30)
    assert run_generate(engine_path(), main, PROMPT, 30, "--mtp", str(out), "--spec", "3") == plain
    got = draft_logits(main, out, tmp_path / "got.bin")
    ref = draft_logits(main, model["mtp_ggufs"][reference], tmp_path / "ref.bin")
    assert np.abs(got - ref).max() <= tolerance * np.abs(ref).max()


def test_single_file_checkpoint_without_index(hub, model, tmp_path, monkeypatch):
    repo_dir = hub.repo_dir.parent / CKPT_REPO.split("/")[1]
    repo_dir.mkdir()
    for name in ("config.json", "model.safetensors"):
        (repo_dir / name).write_bytes((Path(model["hf_dir"]) / name).read_bytes())
    out = tmp_path / "head.gguf"
    stale = tmp_path / "head.parts-0123456789ab"      # pieces of another commit: useless, removed
    stale.mkdir()
    (stale / "plan.json").write_text("{}")
    make_head(hub, out, "q8_0", monkeypatch)
    assert not stale.exists()
    assert all(r["range"] and not r["range"].endswith("-") for r in shard_gets(hub))
    assert len(piece_gets(hub)) == 2       # the PLE constants and the mtp.* tensors: two runs of adjacent bytes
    ref = draft_logits(model["gguf"]["f32"], model["mtp_ggufs"]["q8_0"], tmp_path / "ref.bin")
    assert np.array_equal(draft_logits(model["gguf"]["f32"], out, tmp_path / "got.bin"), ref)


def test_kill_9_mid_fetch_resumes_from_the_pieces_on_disk(hub, ckpt, model, tmp_path):
    hub.state.bytes_per_s = 150_000
    out = tmp_path / "head.gguf"
    command = [sys.executable, "-c", NO_TORCH, "--repo", CKPT_REPO, "--out", str(out), "--outtype", "f32"]
    process = subprocess.Popen(command, cwd=PROJECT_DIR, env=installer_env(hub), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    parts = lambda: list(tmp_path.glob("*.parts-*/*.part")) + list(tmp_path.glob("*.parts-*/*.bin"))  # noqa: E731
    try:
        wait_for(lambda: half_on_disk(parts(), 100_000), 60, "a piece half on disk")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    kept = sum(p.stat().st_size for p in parts())
    assert 0 < kept < ckpt and any(p.suffix == ".part" for p in parts()), "the kill should land mid-piece"
    gets_before = len(piece_gets(hub))

    hub.state.bytes_per_s = None
    result = subprocess.run(command, cwd=PROJECT_DIR, env=installer_env(hub), capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "already on disk" in result.stdout
    assert sum(range_bytes(r) for r in piece_gets(hub)[gets_before:]) == ckpt - kept   # nothing fetched twice
    ref = draft_logits(model["gguf"]["f32"], model["mtp_ggufs"]["f32"], tmp_path / "ref.bin")
    assert np.array_equal(draft_logits(model["gguf"]["f32"], out, tmp_path / "got.bin"), ref)


def test_dropped_connection_continues_the_range_where_it_stopped(hub, ckpt, tmp_path, monkeypatch):
    hub.state.drop_after_bytes = 5        # config.json, the first file read, is cut short: it is read again
    cut = []
    log = hub.state.log

    def log_and_cut_a_big_range(method, path, headers):     # the server cuts the first range over 150 kB
        log(method, path, headers)
        first, _, last = (headers.get("Range") or "bytes=0-0")[6:].partition("-")
        if not cut and path.endswith(".safetensors") and last and int(last) - int(first) > 150_000:
            cut.append((path, int(first), int(last)))
            hub.state.drop_after_bytes = 100_000

    monkeypatch.setattr(hub.state, "log", log_and_cut_a_big_range)
    make_head(hub, tmp_path / "head.gguf", "f32", monkeypatch)
    assert cut, "no range over 150 kB to cut"
    path, first, last = cut[0]
    again = [r["range"] for r in piece_gets(hub) if r["path"] == path and r["range"].endswith(f"-{last}")]
    # the bytes written before the drop (whole 64 KiB chunks) are kept; the rest is asked for again
    assert again == [f"bytes={first}-{last}", f"bytes={first + 65536}-{last}"], again
    assert sum(range_bytes(r) for r in piece_gets(hub)) == ckpt + (last - first + 1 - 65536)
    assert len([r for r in hub.state.requests if r["path"].endswith("/config.json")]) == 2


def test_clear_refusals_before_any_tensor_byte(hub, ckpt, model, tmp_path, monkeypatch):
    repo_dir = hub.repo_dir.parent / CKPT_REPO.split("/")[1]
    with pytest.raises(MtpFetchError, match="does not describe the model in tiny8-f32.gguf"):
        make_head(hub, tmp_path / "a.gguf", "f32", monkeypatch, Path(tiny("tiny8")["gguf"]["f32"]))

    config = json.loads((repo_dir / "config.json").read_text())
    (repo_dir / "config.json").write_text(json.dumps(dict(config, shared_expert_intermediate_size=64)))
    with pytest.raises(MtpFetchError, match=r"does not match.*shared_expert.gate_proj.weight has shape \[32, 64\]"):
        make_head(hub, tmp_path / "b.gguf", "f32", monkeypatch)
    (repo_dir / "config.json").write_text(json.dumps(config))

    index = json.loads((repo_dir / "model.safetensors.index.json").read_text())
    without = {k: v for k, v in index["weight_map"].items() if not k.startswith("mtp.")}
    (repo_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": without}))
    with pytest.raises(MtpFetchError, match="no mtp.* tensors"):
        make_head(hub, tmp_path / "c.gguf", "f32", monkeypatch)
    (repo_dir / "model.safetensors.index.json").write_text(json.dumps(index))

    shard = repo_dir / f"model-00001-of-{N_SHARDS:05d}.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(MtpFetchError, match="truncated file"):
        make_head(hub, tmp_path / "d.gguf", "f32", monkeypatch)
    assert piece_gets(hub) == []

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    with pytest.raises(Exception, match="test-org/No-Such-Repo.*HTTP 404"):
        make_mtp_head(MtpSource("test-org/No-Such-Repo", None), tmp_path / "e.gguf", "f32", say=lambda _: None)


def test_a_server_that_ignores_range_is_refused(model, tmp_path, monkeypatch):
    """Python's own http.server answers every GET with the whole file (200), as some mirrors do."""
    commit = "c" * 40
    root = tmp_path / "static"
    reshard(Path(model["hf_dir"]), root / CKPT_REPO / "resolve" / commit)
    revision = root / "api" / "models" / CKPT_REPO / "revision"
    revision.mkdir(parents=True)
    (revision / "main").write_text(json.dumps({"sha": commit}))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(MtpFetchError, match="ignored the Range request.*whole shard is not downloaded"):
            make_mtp_head(MtpSource(CKPT_REPO, None), tmp_path / "head.gguf", "f32", say=lambda _: None)
    finally:
        server.shutdown()
        server.server_close()


def test_bf16_checkpoint_is_read_like_convert_py(model, tmp_path):
    """The real checkpoint is BF16: the numpy reader here must widen it exactly as torch does in convert.py."""
    import torch
    from safetensors.torch import load_file, save_file

    import convert

    hf = tmp_path / "hf-bf16"
    hf.mkdir()
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        (hf / name).write_bytes((Path(model["hf_dir"]) / name).read_bytes())
    sd = load_file(str(Path(model["hf_dir"]) / "model.safetensors"))
    save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in sd.items()},
              str(hf / "model.safetensors"))
    convert.convert(str(hf), str(tmp_path / "main.gguf"), "f32", str(tmp_path / "ref-mtp.gguf"))
    mtp_extract.write_mtp_gguf(mtp_extract.locate_local(str(hf)), str(hf), str(tmp_path / "mtp.gguf"), "f32")
    ref, got = GGUFFile(str(tmp_path / "ref-mtp.gguf")), GGUFFile(str(tmp_path / "mtp.gguf"))
    assert set(got.tensors) == {n for n in ref.tensors if n.startswith("blk.")}
    for name in got.tensors:
        assert np.array_equal(got.tensor_f32(name), ref.tensor_f32(name)), name
    skip = ("tokenizer.", "general.name")
    assert {k: v for k, v in got.fields.items() if not k.startswith(skip)} == \
           {k: v for k, v in ref.fields.items() if not k.startswith(skip)}


def installer_catalog(tmp_path: Path, checkpoint_repo: str | None) -> Path:
    catalog = tmp_path / f"catalog-{checkpoint_repo is not None}.json"
    catalog.write_text(json.dumps({"default_family": "original", "families": {"original": {
        "repo": GGUF_REPO, "revision": None, "mtp": {"checkpoint_repo": checkpoint_repo, "revision": None},
        "sizes": {"Q2_0": {"file_pattern": "*Q2_0*.gguf", "shards": 1, "files": None, "ram_floor_gib": 1}}}}}))
    return catalog


def run_setup(hub, home: Path, catalog: Path, *extra: str) -> tuple[str, dict]:
    command = [sys.executable, "-m", "installer", "--setup", "--yes", "--model", "Q2_0", "--vision", "no",
               "--no-start", "--engine", engine_path(), "--dir", str(home), "--catalog", str(catalog), *extra]
    result = subprocess.run(command, cwd=PROJECT_DIR, env=installer_env(hub), capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, json.loads((home / "strata-original-Q2_0.json").read_text())


def test_installer_converts_the_head_once_and_runs_the_engine_with_it(hub, ckpt, model, tmp_path):
    (hub.repo_dir / "tiny-Q2_0-00001-of-00001.gguf").write_bytes(Path(model["gguf"]["f32"]).read_bytes())
    home = tmp_path / "home"
    out, config = run_setup(hub, home, installer_catalog(tmp_path, CKPT_REPO), "--speculate")
    head = home / "models" / "Tiny-GGUF" / "original-MTP-Q8_0.gguf"
    assert config["engine_args"][-2:] == ["--mtp", str(head)], out
    assert f"MTP head ready: {head}" in out
    ref = draft_logits(model["gguf"]["f32"], model["mtp_ggufs"]["q8_0"], tmp_path / "ref.bin")
    assert np.array_equal(draft_logits(config["model"], head, tmp_path / "got.bin"), ref)

    gets = len(shard_gets(hub))
    out, config = run_setup(hub, home, installer_catalog(tmp_path, CKPT_REPO))
    assert "converted earlier" in out and len(shard_gets(hub)) == gets
    # Without --speculate the head is kept but not used (a drafted window still costs more than it saves)
    assert "--mtp" not in config["engine_args"] and "--speculate turns it on" in out

    out, config = run_setup(hub, home, installer_catalog(tmp_path, None))
    assert "names no original checkpoint for 'original'" in out and "--mtp" not in config["engine_args"]
