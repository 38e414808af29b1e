"""The per-op tables of two STRATA_CUDA_PROFILE=1 logs side by side (the "decode passes" table of each), in GPU ms a
step: each log's total over its decode steps (-n, the same for both), so with a random MTP head drafting every step
the difference is what a drafted window adds to a plain token, op by op (tests/gpu/spec_profile.sh).
usage: python3 tests/gpu/profile_diff.py PLAIN.log DRAFTED.log STEPS"""
from __future__ import annotations

import re
import sys

ROW = re.compile(r"^\s+(.+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)$")


def decode_table(path: str) -> dict[str, tuple[int, float]]:
    """{op: (calls, gpu ms)} of the log's "decode passes" table."""
    rows, inside = {}, False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("cuda op profile"):
                inside = ", decode passes:" in line
                continue
            m = ROW.match(line.rstrip("\n")) if inside else None
            if m:
                rows[m.group(1).strip()] = (int(m.group(2)), float(m.group(3)))
            elif inside and not line.startswith("  "):
                inside = False
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__)
        return 2
    a, b, steps = decode_table(argv[0]), decode_table(argv[1]), int(argv[2])
    ops = sorted(set(a) | set(b), key=lambda o: -(b.get(o, (0, 0.0))[1] - a.get(o, (0, 0.0))[1]))
    print(f"{'op':32s} {'plain ms/step':>14s} {'drafted ms/step':>16s} {'added':>8s} {'calls/step':>16s}")
    for o in ops:
        (ca, ga), (cb, gb) = a.get(o, (0, 0.0)), b.get(o, (0, 0.0))
        print(f"{o:32s} {ga / steps:14.3f} {gb / steps:16.3f} {(gb - ga) / steps:8.3f} "
              f"{ca / steps:7.1f} -> {cb / steps:6.1f}")
    ta, tb = sum(g for _, g in a.values()), sum(g for _, g in b.values())
    print(f"{'all ops':32s} {ta / steps:14.3f} {tb / steps:16.3f} {(tb - ta) / steps:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
