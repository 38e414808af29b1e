"""Split GGUF files (name-0000N-of-0000M.gguf): a first shard holding only metadata, data offsets restarting per
shard, the PLE table read from a later shard by positioned reads. The engine must give the same tokens as from
the single file."""
import glob
import os

from strata_testing import run_generate
from test_gguf_errors import rewrite


def test_split_model_equals_single_file(engine_bin, tiny_models, tmp_path):
    single = tiny_models("tiny")["gguf"]["f32"]
    base = str(tmp_path / "tiny.gguf")
    rewrite(single, base, split_max_tensors=40, small_first_shard=True)
    shards = sorted(glob.glob(str(tmp_path / "tiny-*-of-*.gguf")))
    assert len(shards) >= 3, shards
    prompt = [5, 17, 300, 2, 479, 88, 9, 41, 41, 7]
    want = run_generate(engine_bin, single, prompt, 12)
    got = run_generate(engine_bin, shards[1], prompt, 12)     # any shard name opens the whole set
    assert got == want
    # the PLE rows also read past the page cache (O_DIRECT) at the table's offset in its shard
    os.environ["STRATA_PLE_UNBUFFERED"] = "1"
    try:
        assert run_generate(engine_bin, shards[0], prompt, 12) == want
    finally:
        del os.environ["STRATA_PLE_UNBUFFERED"]


def test_missing_shard_is_a_clear_error(engine_bin, tiny_models, tmp_path):
    import subprocess
    single = tiny_models("tiny")["gguf"]["f32"]
    rewrite(single, str(tmp_path / "m.gguf"), split_max_tensors=40, small_first_shard=True)
    shards = sorted(glob.glob(str(tmp_path / "m-*-of-*.gguf")))
    os.remove(shards[-1])
    r = subprocess.run([engine_bin, "info", shards[0]], capture_output=True, text=True)
    assert r.returncode == 1 and "cannot open" in r.stderr and os.path.basename(shards[-1]) in r.stderr, r.stderr
