// Where each (token, expert) pair of a decode-sized hybrid MoE call is computed (backend/cuda/hybrid_device.h):
// in a GPU cache slot, by the GPU reading the expert zero-copy from pinned host memory, or by the CPU pool. Plain
// C++ that nvcc also compiles for the device, so the plan kernel and the CPU tests run the same rule.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata {

enum PairPlace : int32_t { kPairCached = 0, kPairZeroCopy = 1, kPairCpu = 2 };
constexpr int kPlacePairsMax = 64;   // pairs of one call at most (a verify window of up to 6 tokens × top-10)

// For P ≤ kPlacePairsMax pairs with expert ids[p] held in cache slot slot[p] (−1: not cached): place[p]. A cached
// pair stays on its slot. Of the D distinct missed experts, the first round(share · D) in ascending id are read
// zero-copy when zero_copy (the rule of --gpu-miss-share for staged misses: experts/staged_misses.h), the rest go to
// the CPU; every pair of one expert goes to the same place. Returns the number of CPU pairs.
// carry (optional): the rounding error carried from call to call, so that over many calls the zero-copy experts
// are share · D on average even where D is small (share 0.3 of 4 misses a layer: 1 or 2, not always 1).
// max_zero_copy: at most this many experts zero-copy (the GPU's staging slots of one call); the rest go to the CPU.
STRATA_HOST_DEVICE inline int place_pairs(const int32_t* ids, const int32_t* slot, int P, double share, bool zero_copy,
                                          int32_t* place, float* carry = nullptr, int max_zero_copy = kPlacePairsMax) {
    int32_t miss[kPlacePairsMax];   // distinct missed experts, ascending
    int distinct = 0;
    for (int p = 0; p < P; ++p) {
        if (slot[p] >= 0) continue;
        const int32_t e = ids[p];
        int i = 0;
        while (i < distinct && miss[i] < e) ++i;
        if (i < distinct && miss[i] == e) continue;
        for (int j = distinct; j > i; --j) miss[j] = miss[j - 1];
        miss[i] = e;
        ++distinct;
    }
    const double want = share * distinct + (carry && zero_copy ? *carry : 0.0);
    int zc = zero_copy ? (int)(want + 0.5) : 0;
    if (zc > distinct) zc = distinct;
    if (zc < 0) zc = 0;
    const int wanted = zc;
    if (zc > max_zero_copy) zc = max_zero_copy;
    if (carry && zero_copy) {
        const double c = want - wanted;   // the cap is not carried: it is a limit, not rounding
        *carry = (float)(c > 1 ? 1 : c < -1 ? -1 : c);
    }
    int n_cpu = 0;
    for (int p = 0; p < P; ++p) {
        if (slot[p] >= 0) {
            place[p] = kPairCached;
            continue;
        }
        int rank = 0;
        while (miss[rank] != ids[p]) ++rank;
        place[p] = rank < zc ? kPairZeroCopy : kPairCpu;
        n_cpu += place[p] == kPairCpu;
    }
    return n_cpu;
}

}  // namespace strata
