"""A model of the MoE part of a hybrid decode pass (not a measurement): 48 layers, 2-6 missed experts a layer, the
GPU side g0 + zc * t_pcie, the CPU side (misses - zc) * t_cpu with +-jitter, each layer ending with the later side.
Compares whole experts (zc rounded with a carry, as place_pairs does) with a fractional split (zc = share * misses,
the boundary expert's rows shared), each at its best share. Times in ns; usage: python3 split_model.py"""
import random


def pass_ns(share, fractional, m, jitter=0.15, seed=1, passes=300):
    rnd, total = random.Random(seed), 0.0
    for _ in range(passes):
        carry = 0.0
        for _ in range(48):
            misses = rnd.choice([2, 3, 4, 5, 6])
            if fractional:
                zc = share * misses
            else:
                want = share * misses + carry
                zc = max(0, min(misses, int(want + 0.5)))
                carry = want - zc
            noise = 1 + jitter * (2 * rnd.random() - 1)
            total += 5000 + max(m[0] + zc * m[1], (misses - zc) * m[2] * noise)
    return total / passes


# (g0, t_pcie, t_cpu) per layer / per 1.38 MB expert: the H200 host (53 GB/s zero-copy, ~20 GB/s pool), then
# test_miss_share's first and second machines.
for m in [(20000, 26000, 69000), (60000, 38000, 69000), (60000, 55000, 35000)]:
    for fractional in (False, True):
        best = min((pass_ns(i / 100, fractional, m), i / 100) for i in range(0, 101, 2))
        print(m, "fractional" if fractional else "whole experts", f"{best[0] / 1e6:.2f} ms at share {best[1]:.2f}")
