# The vision model for images: strata-vision reads our own vision GGUF (vision/README.md), not llama.cpp's mmproj,
# so the model.visual.* tensors of the original checkpoint the catalogue names are fetched by byte range
# (mtp_fetch.py's machinery with a vision TensorFilter), with config.json and preprocessor_config.json, and converted
# once by vision/convert_vision.py's convert() into <models dir>/<name>-vision.gguf. Also runnable by hand:
#   python -m installer.vision_head --repo ORG/NAME [--revision REV] --out FILE.gguf [--outtype f16|bf16|f32]
import argparse
import contextlib
import math
import os
import sys
from pathlib import Path

from installer.checkpoint_source import CheckpointSource, already_made, finish_fetch, start_fetch
from installer.hub_api import resolve_url
from installer.mtp_fetch import MtpFetchError, TensorFilter, fetch_tensors, get_small, mtp_extract
from installer.mtp_head import run_fetch_command

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "vision"))
import convert_vision  # noqa: E402  (vision/: the config readers, the tensor plan and the GGUF writer)

# f16 needs no torch (bf16 does, in convert_vision.encode) and is as accurate for the tower (vision/README.md).
DEFAULT_OUTTYPE = "f16"
OUTTYPES = ("f16", "bf16", "f32")
BYTES_PER_PARAM = {"bf16": 2, "f16": 2, "f32": 4}
FLOAT_DTYPES = ("F32", "F16", "BF16")
VisionSource = CheckpointSource


def vision_source(catalog: dict, family: str) -> VisionSource | None:
    """The original checkpoint holding the family's vision tower: vision.checkpoint_repo when the catalogue has it,
    else the MTP head's checkpoint (the same original model); None when it names neither."""
    family_entry = catalog["families"][family]
    for key in ("vision", "mtp"):
        entry = family_entry.get(key) or {}
        if entry.get("checkpoint_repo"):
            return VisionSource(entry["checkpoint_repo"], entry.get("revision"))
    return None


def vision_file_name(name: str) -> str:
    return f"{name}-vision.gguf"


def vision_filter(vc: dict) -> TensorFilter:
    """The tensors convert_vision.tensor_plan(vc) reads, under their checkpoint names (model.visual.* or visual.*)."""
    plan = convert_vision.tensor_plan(vc)
    wanted = {p + hf_name: (hf_name, shape) for p in ("model.visual.", "visual.") for _, hf_name, shape in plan}

    def name_of(key):
        return key if key in wanted else None

    def in_index(names):
        if not names:
            raise MtpFetchError("no model.visual.* tensors in its index (it holds no vision tower).")

    def check(found):
        prefix = next((p for p in ("model.visual.", "visual.") if p + "patch_embed.proj.weight" in found), None)
        if prefix is None:
            raise MtpFetchError("no vision tower (model.visual.patch_embed.proj.weight is not in the checkpoint).")
        problems = []
        for _, hf_name, shape in plan:
            key = prefix + hf_name
            if key not in found:
                problems.append(f"{key} is missing")
                continue
            dtype, got = found[key]
            if dtype not in FLOAT_DTYPES:
                problems.append(f"{key} has dtype {dtype} (F32/F16/BF16 only)")
            elif math.prod(got) != math.prod(shape) or (len(shape) == 1 and tuple(got) != tuple(shape)):
                problems.append(f"{key} has shape {list(got)}, its config.json says {list(shape)}")
        if problems:
            raise MtpFetchError("its vision tower does not match its config.json: " + "; ".join(problems[:6])
                                + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""))
    return TensorFilter("vision tensors", "Vision model", name_of, in_index, check, "vision")


class FetchedCheckpoint:
    """convert_vision.Checkpoint's prefix/get over the fetched pieces (numpy only: BF16 widened exactly as torch)."""

    def __init__(self, source: "mtp_extract.TensorSource"):
        self.source = source
        for p in convert_vision.PREFIXES:
            if source.has(p + "patch_embed.proj.weight"):
                self.prefix = p
                break
        else:
            raise convert_vision.ConvertError("no vision tower among the fetched tensors")

    def get(self, name: str):
        key = self.prefix + name
        if not self.source.has(key):
            raise convert_vision.ConvertError(f"tensor {key} is missing")
        return self.source.f32(key)


@contextlib.contextmanager
def _checkpoint_is(source):
    """convert_vision.convert() reads its tensors through convert_vision.Checkpoint(hf_dir): give it these."""
    original = convert_vision.Checkpoint
    convert_vision.Checkpoint = lambda _hf_dir: FetchedCheckpoint(source)
    try:
        yield
    finally:
        convert_vision.Checkpoint = original


def make_vision_model(source: VisionSource, out: Path, outtype: str = DEFAULT_OUTTYPE, say=print) -> Path:
    """out, fetched and converted unless an earlier run already made it from the same source."""
    if already_made(out, source, outtype):
        say(f"Vision model: {out} (converted earlier from {source.repo}).")
        return out
    session, commit, work_dir = start_fetch(source, out, "vision model", say)
    for name, required in (("config.json", True), ("preprocessor_config.json", False)):
        body = get_small(session, resolve_url(source.repo, commit, name), f"{name} of {source.repo}@{commit[:12]}",
                         missing_ok=not required)
        if body is not None:
            (work_dir / name).write_bytes(body)
    partial = out.with_name(out.name + ".partial")
    try:
        vc = convert_vision.read_vision_config(str(work_dir))
        tensors = fetch_tensors(session, source.repo, commit, None, work_dir, BYTES_PER_PARAM[outtype], say,
                                wanted_filter=vision_filter(vc))
        say(f"Converting the vision tower to {out.name} ({outtype.upper()}) ...")
        with _checkpoint_is(tensors):
            convert_vision.convert(str(work_dir), str(partial), outtype)
    except convert_vision.ConvertError as e:
        partial.unlink(missing_ok=True)
        raise MtpFetchError(f"{source.repo}@{commit[:12]}: {e}") from e
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, out)
    return finish_fetch(source, out, commit, outtype, work_dir, "Vision model", say)


def vision_model_for(catalog: dict, family: str, name: str, model_dir: Path, outtype: str = DEFAULT_OUTTYPE,
                     say=print) -> Path | None:
    """The installer's step: <model_dir>/<name>-vision.gguf, or None (said why) when no checkpoint is named."""
    source = vision_source(catalog, family)
    if source is None:
        say(f"\nImages are not available for '{family}': the model catalogue names no original checkpoint "
            f"(vision.checkpoint_repo / mtp.checkpoint_repo) to take the vision tower from. Going on without images.")
        return None
    return make_vision_model(source, model_dir / vision_file_name(name), outtype, say)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m installer.vision_head",
                                 description="Fetch only the model.visual.* tensors of a Hub checkpoint and write the "
                                             "vision GGUF that strata-vision reads.")
    ap.add_argument("--repo", required=True, help="the original safetensors checkpoint, ORG/NAME")
    ap.add_argument("--revision", help="branch, tag or commit (default: main)")
    ap.add_argument("--out", type=Path, required=True, help="the vision GGUF to write")
    ap.add_argument("--outtype", default=DEFAULT_OUTTYPE, choices=OUTTYPES)
    args = ap.parse_args(argv)
    return run_fetch_command(lambda: make_vision_model(VisionSource(args.repo, args.revision), args.out.resolve(),
                                                       args.outtype), "The vision model")


if __name__ == "__main__":
    sys.exit(main())
