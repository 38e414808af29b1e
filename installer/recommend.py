# The recommended answers to the four questions, from the PC's facts: family, size (from RAM), context (from
# VRAM), images (when a usable GPU is there). Pure functions; questions.py asks, this only suggests.
from installer.pc_check import PcFacts

CONTEXT_CHOICES = (8192, 16384, 32768, 65536, 131072, 262144)

# The engine keeps K, V and the QSA indexer keys of the 12 attention layers in F32, for the whole context, on the
# GPU (engine/src/model/session.cpp): per token and layer K 2·256 + V 2·256 + raw indexer key 128 + a 128-wide block
# key per 4 tokens = 1,184 floats, so 12 × 4,736 B = 55.5 KiB a token (3.5 GiB at 64K, 13.9 GiB at 256K). What is
# left after the dense weights goes to the expert cache, which is where speed comes from, so the recommendation keeps
# the KV cache within KV_VRAM_SHARE of the card (the share the first plan gave it: 6 GiB of 22 GiB). Update the bytes
# when the engine stores KV in FP16 or INT8.
KV_BYTES_PER_TOKEN = 12 * (2 * 256 + 2 * 256 + 128 + 128 // 4) * 4
KV_VRAM_SHARE = 0.27


def recommend_family(catalog: dict) -> str:
    return catalog.get("default_family") or next(iter(catalog["families"]))


def recommend_size(catalog: dict, family: str, ram_total_gib: float) -> str | None:
    """The largest size whose RAM floor this PC meets (better answers); None when none fits."""
    sizes = catalog["families"][family]["sizes"]
    fitting = [name for name, size in sizes.items() if ram_total_gib >= float(size.get("ram_floor_gib") or 0)]
    return max(fitting, key=lambda name: sizes[name].get("download_gb") or 0) if fitting else None


def recommend_context(facts: PcFacts) -> int:
    gpu = facts.best_gpu
    if gpu is None:
        return 8192
    budget = KV_VRAM_SHARE * gpu.vram_total_gib * 1024 ** 3
    fitting = [c for c in CONTEXT_CHOICES if c * KV_BYTES_PER_TOKEN <= budget]
    return max(fitting) if fitting else 8192


def recommend_vision(gpu_ok: bool) -> bool:
    # Pictures are encoded in 0.1-0.5 s on a GPU but 10-30 s on the CPU.
    return gpu_ok


def parse_context(text: str) -> int:
    """'32K', '32k', '32768' -> 32768. Raises ValueError naming the text when it is not a size we offer."""
    cleaned = text.strip().upper()
    try:
        value = int(cleaned[:-1]) * 1024 if cleaned.endswith("K") else int(cleaned)
    except ValueError:
        raise ValueError(f"context {text!r} is not a number of tokens (examples: 32K, 65536)") from None
    if not 4096 <= value <= 262144:
        raise ValueError(f"context {text!r} is outside 4K..256K")
    return value


def context_label(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)
