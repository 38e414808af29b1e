# The engine's ggml type table (engine/src/gguf/ggml_types.cpp) agrees with gguf-py's GGML_QUANT_SIZES.
import re
import pathlib

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

TABLE = pathlib.Path(__file__).resolve().parents[2] / "engine" / "src" / "gguf" / "ggml_types.cpp"
ENTRY = re.compile(r'\{GgmlType::(\w+), "(\w+)", (\d+), (\d+)\}')


def engine_table():
    rows = {m[0]: (m[1], int(m[2]), int(m[3])) for m in ENTRY.findall(TABLE.read_text())}
    assert len(rows) > 30, f"could not parse the type table in {TABLE}"
    return rows


def test_sizes_match_gguf():
    rows = engine_table()
    for qtype, (block, nbytes) in GGML_QUANT_SIZES.items():
        assert qtype.name in rows, f"{qtype.name} missing from {TABLE.name}"
        name, eblock, ebytes = rows[qtype.name]
        assert name == qtype.name, f"{qtype.name}: name {name!r}"
        assert (eblock, ebytes) == (block, nbytes), f"{qtype.name}: engine {(eblock, ebytes)} != gguf {(block, nbytes)}"


def test_ids_match_gguf():
    enum_src = (TABLE.parent / "ggml_types.h").read_text()
    for qtype in GGMLQuantizationType:
        m = re.search(rf"\b{qtype.name} = (\d+)", enum_src)
        assert m, f"{qtype.name} missing from the GgmlType enum"
        assert int(m[1]) == int(qtype), f"{qtype.name}: engine id {m[1]} != gguf id {int(qtype)}"


def test_q2_0_geometry():
    name, block, nbytes = engine_table()["Q2_0"]
    assert (block, nbytes) == (64, 18)   # GGUF.md §4.1; gguf-py predates Q2_0
