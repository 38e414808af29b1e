"""Builds the tiny models here (engine/tools/make_tiny.py) and copies a set of their GGUFs into a folder that the
GPU run carries (git-ignored; the device tool carries at most 64 MiB, so each set stays under ~61 MB).

usage: python3 tests/gpu/prepare_models.py [--set a|b] [--out .gpu-models]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "engine", "tools"))

# Set a: every outtype of tiny, the quantized types of tiny8 and wide256, realvocab's smallest file (~61 MB).
# Set b: the float types of the larger configs and realvocab q2_0 (~60 MB).
SETS = {
    "a": {"tiny": ["f32", "f16", "bf16", "q8_0", "q2_0", "iq2_xs"], "tiny8": ["q8_0", "q2_0", "iq2_xs"],
          "wide256": ["q8_0", "q2_0", "iq2_xs"], "realvocab": ["iq2_xs"]},
    "b": {"tiny8": ["f16", "bf16"], "wide256": ["f16"], "realvocab": ["q2_0"]},
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", default="a", choices=sorted(SETS))
    ap.add_argument("--out", default=os.path.join(REPO, ".gpu-models"))
    args = ap.parse_args(argv)
    import make_tiny

    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    manifest, total = {}, 0
    for config, types in SETS[args.set].items():
        built = make_tiny.build(config)
        manifest[config] = {}
        for t in types:
            fn = f"{config}-{t}.gguf"
            shutil.copyfile(built["gguf"][t], os.path.join(args.out, fn))
            manifest[config][t] = fn
            total += os.path.getsize(os.path.join(args.out, fn))
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"{args.out}: {sum(len(v) for v in manifest.values())} models, {total / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
