# Shared fixtures for the block-format tests: where the engine build (and its tool_* helpers) lives.
import os
import pathlib

import pytest


@pytest.fixture(scope="session")
def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("STRATA_BUILD", "/work/main/build"))


@pytest.fixture(scope="session")
def dequant_tool(build_dir) -> pathlib.Path:
    for p in (build_dir / "tool_quant_dequant", build_dir / "engine" / "tool_quant_dequant"):
        if p.is_file():
            return p
    pytest.skip(f"tool_quant_dequant not built under STRATA_BUILD={build_dir} (build the engine first)")
