"""The CUDA kernels' launch contract (engine/src/backend/cuda/kernels/launch.cuh): kernels run as programmatic
dependent launches, so a kernel's blocks can start while the previous kernel still runs. Stream order holds only if
every kernel waits first (pdl_entry) and every launch goes through launch_kernel. A kernel that forgets the wait reads
half-written data only sometimes, on a GPU, which no CPU test would catch: this reads the sources instead."""
import pathlib
import re

from strata_testing import REPO

CUDA_SRC = pathlib.Path(REPO) / "engine" / "src" / "backend" / "cuda"
PRE_ENTRY_NOTE = "// before pdl_entry:"


def sources():
    files = sorted(p for p in CUDA_SRC.rglob("*") if p.suffix in (".cu", ".cuh", ".h"))
    assert files, CUDA_SRC
    return files


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def matching(text: str, i: int, open_c: str, close_c: str) -> int:
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    raise AssertionError("unbalanced")


def kernels(text: str):
    """(name, body) of every __global__ function definition in text (comments left in)."""
    for m in re.finditer(r"__global__", text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if text[line_start:m.start()].lstrip().startswith("//"):
            continue
        p = text.index("(", m.end())
        if text[:p].rstrip().endswith("__launch_bounds__"):
            p = text.index("(", matching(text, p, "(", ")") + 1)
        name = re.findall(r"(\w+)\s*$", text[:p])[0]
        close = matching(text, p, "(", ")")
        after = text[close + 1:].lstrip()
        if after.startswith(";"):
            continue   # a declaration
        b = text.index("{", close)
        yield name, text[b + 1:matching(text, b, "{", "}")]


def test_every_kernel_waits_for_the_previous_one_first():
    bad, count = [], 0
    for path in sources():
        for name, body in kernels(path.read_text()):
            count += 1
            first = body.strip().splitlines()[0].strip() if body.strip() else ""
            if first == "pdl_entry();":
                continue
            # Weight prefetches may come first, said so on the body's first line; the entry must still be there.
            if first.startswith(PRE_ENTRY_NOTE) and "pdl_entry();" in strip_comments(body):
                continue
            bad.append(f"{path.relative_to(REPO)}: {name} starts with {first!r}")
    assert count >= 50, f"found only {count} kernels: the parser no longer sees them"
    assert not bad, "kernels that do not start with pdl_entry():\n" + "\n".join(bad)


def test_every_launch_goes_through_launch_kernel():
    bad = []
    for path in sources():
        for n, line in enumerate(strip_comments(path.read_text()).splitlines(), 1):
            if "<<<" in line:
                bad.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bad, "kernel launches outside launch_kernel (no programmatic-launch attribute, no check):\n" + \
        "\n".join(bad)


def test_the_checks_catch_a_kernel_without_the_entry():
    # The parser on a made-up file: a kernel without the entry, one with a note but no entry, and good ones.
    text = """
    template <int N> __global__ void __launch_bounds__(128) good(const float* x) {
        pdl_entry();
        (void)x;
    }
    __global__ void noted(const float* w) {
        // before pdl_entry: prefetch
        prefetch(w);
        pdl_entry();
    }
    __global__ void missing(float* y) {
        y[0] = 1.0f;
    }
    __global__ void note_only(float* y) {
        // before pdl_entry: nothing follows
        y[0] = 1.0f;
    }
    __global__ void declared(float* y);
    """
    found = dict(kernels(text))
    assert set(found) == {"good", "noted", "missing", "note_only"}

    def ok(body):
        first = body.strip().splitlines()[0].strip()
        return first == "pdl_entry();" or (first.startswith(PRE_ENTRY_NOTE) and "pdl_entry();" in strip_comments(body))

    assert [n for n, b in found.items() if not ok(b)] == ["missing", "note_only"]
