#include "common/argmax.h"

#include <algorithm>
#include <limits>

namespace strata {

int32_t argmax_first(const float* v, int n) {
    constexpr int kBlock = 512, kLanes = 16;
    const float kLow = -std::numeric_limits<float>::infinity();
    float best = kLow;
    int best_block = -1;
    for (int b0 = 0; b0 < n; b0 += kBlock) {
        const int b1 = std::min(n, b0 + kBlock);
        float lane[kLanes];
        for (float& l : lane) l = kLow;
        int i = b0;
        for (; i + kLanes <= b1; i += kLanes)
            for (int j = 0; j < kLanes; ++j) lane[j] = v[i + j] > lane[j] ? v[i + j] : lane[j];   // NaN: kept
        float m = kLow;
        for (int j = 0; j < kLanes; ++j) m = lane[j] > m ? lane[j] : m;
        for (; i < b1; ++i) m = v[i] > m ? v[i] : m;
        if (m > best) {   // strictly: the first block holding the maximum
            best = m;
            best_block = b0;
        }
    }
    // From the first block holding the maximum (or from 0 when no value is above −inf): the first index equal to it.
    for (int i = std::max(best_block, 0); i < n; ++i)
        if (v[i] == best) return i;
    return 0;   // every value NaN
}

}  // namespace strata
