# When the engine's tool_gguf_dump is built ($STRATA_BUILD), every tensor it reads from the tiny GGUFs equals what
# our reader decodes. Assumed interface (like tool_quant_dequant): tool_gguf_dump <file.gguf> <tensor> <out.f32>,
# writing the tensor dequantized to little-endian f32 in ggml order.
import subprocess

import numpy as np
import pytest

from strata_testing import tiny
from gguf_read import GGUFFile


@pytest.fixture(scope="module")
def dump_tool(build_dir):
    for p in (build_dir / "tool_gguf_dump", build_dir / "engine" / "tool_gguf_dump"):
        if p.is_file():
            return p
    pytest.skip(f"tool_gguf_dump not built under STRATA_BUILD={build_dir}")


@pytest.mark.parametrize("outtype", ["f32", "bf16", "q8_0", "q2_0", "iq2_xs"])
def test_engine_reads_every_tensor(dump_tool, tmp_path, outtype):
    path = tiny("wide256")["gguf"][outtype]
    f = GGUFFile(path)
    for name, (ne, t, _) in f.tensors.items():
        out = tmp_path / "t.f32"
        subprocess.run([str(dump_tool), path, name, str(out)], check=True, capture_output=True)
        got = np.fromfile(out, dtype="<f4")
        want = f.tensor_f32(name).reshape(-1)
        assert got.shape == want.shape, name
        if t == "F32":
            assert np.array_equal(got, want), name
        else:
            assert np.allclose(got, want, rtol=1e-6, atol=1e-7), (name, t)
