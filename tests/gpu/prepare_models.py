"""Builds the tiny models here (engine/tools/make_tiny.py) and copies a set of their GGUFs into a folder that the
GPU run carries (git-ignored). The device tool carries at most 64 MiB with the rest of the tree (which already
holds the ~22 MB demo GGUFs), so each set stays under ~40 MB; the trained demo model is listed in place, not copied.

usage: python3 tests/gpu/prepare_models.py [--set a|b|c|d] [--out .gpu-models]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "engine", "tools"))

# Set a: every outtype of tiny, the quantized types of tiny8 and wide256 (~39 MB).
# Set b: realvocab's smallest file and tiny8 f16 (~36 MB).
# Set c: all four configs in one run: every outtype of tiny, q2_0 and iq2_xs of the others (~42 MB).
SETS = {
    "c": {"tiny": ["f32", "f16", "bf16", "q8_0", "q2_0", "iq2_xs"], "tiny8": ["q2_0", "iq2_xs"],
          "wide256": ["q2_0", "iq2_xs"], "realvocab": ["iq2_xs"]},
    "a": {"tiny": ["f32", "f16", "bf16", "q8_0", "q2_0", "iq2_xs"], "tiny8": ["q8_0", "q2_0", "iq2_xs"],
          "wide256": ["q8_0", "q2_0", "iq2_xs"]},
    "b": {"realvocab": ["iq2_xs"], "tiny8": ["f16"]},
    # Set d: a small one that fits beside a wheel or two (~15 MB): each config once, f32 and two block formats.
    "d": {"tiny": ["f32", "q2_0", "iq2_xs"], "tiny8": ["q2_0"], "wide256": ["iq2_xs"]},
}
DEMO = os.path.join(REPO, "installer", "demo", "strata-demo.gguf")   # trained, f16; tracked in the repo
# MTP heads copied beside these (config, outtype) files, listed in mtp.json {model file: head file}: speculative
# verify windows on the GPU (tests/gpu/device_join_parity.py).
MTP_FOR = {("tiny", "q2_0"), ("tiny8", "q2_0")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", default="a", choices=sorted(SETS))
    ap.add_argument("--out", default=os.path.join(REPO, ".gpu-models"))
    args = ap.parse_args(argv)
    import make_tiny

    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    manifest, heads, total = {}, {}, 0
    for config, types in SETS[args.set].items():
        built = make_tiny.build(config)
        manifest[config] = {}
        for t in types:
            fn = f"{config}-{t}.gguf"
            shutil.copyfile(built["gguf"][t], os.path.join(args.out, fn))
            manifest[config][t] = fn
            total += os.path.getsize(os.path.join(args.out, fn))
            head = built.get("mtp_ggufs", {}).get(t) or built.get("mtp_ggufs", {}).get("q8_0")   # heads: f32, q8_0
            if (config, t) in MTP_FOR and head:
                heads[fn] = f"{config}-{t}-mtp.gguf"
                shutil.copyfile(head, os.path.join(args.out, heads[fn]))
                total += os.path.getsize(os.path.join(args.out, heads[fn]))
    with open(os.path.join(args.out, "mtp.json"), "w") as f:
        json.dump(heads, f, indent=1)
    if os.path.exists(DEMO):
        manifest["demo"] = {"f16": os.path.relpath(DEMO, args.out)}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"{args.out}: {sum(len(v) for v in manifest.values())} models, {total / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
