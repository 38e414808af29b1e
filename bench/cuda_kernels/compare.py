"""Before / after table of two cuda_matmul_speed result files (same cases, matched by group, name and type).

usage: python3 bench/cuda_kernels/compare.py speed_a.json speed_b.json
"""
import json
import sys


def load(path: str) -> dict:
    with open(path) as f:
        return {(r["group"], r["name"], r["type"]): r for r in json.load(f)["results"]}


def main() -> int:
    before, after = load(sys.argv[1]), load(sys.argv[2])
    print(f"{'group':8} {'case':40} {'type':8} {'before us':>10} {'after us':>10} {'before GB/s':>12} "
          f"{'after GB/s':>11} {'speedup':>8}")
    for key, a in after.items():
        b = before.get(key)
        if b is None:
            continue
        print(f"{key[0]:8} {key[1]:40} {key[2]:8} {b['us']:10.2f} {a['us']:10.2f} {b['GBps']:12.1f} "
              f"{a['GBps']:11.1f} {b['us'] / a['us']:7.2f}x")
    # T = 8 against T = 1 on the big matrices: the target is at most ~2x the time.
    print("\nbig matrices, time at T=8 / time at T=1 (after; before):")
    for (group, name, typ), a in after.items():
        if group == "big" and name == "T=8":
            a1 = after.get((group, "T=1", typ))
            b8, b1 = before.get((group, "T=8", typ)), before.get((group, "T=1", typ))
            ratio_b = f"{b8['us'] / b1['us']:.2f}" if b8 and b1 else "-"
            print(f"  {typ:8} {a['us'] / a1['us']:.2f}   {ratio_b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
