// PleRowCache (model/ple_row_cache.h) against a plain model of the same CLOCK policy (a vector searched linearly):
// after every one of 200,000 random finds and inserts, over row ids that collide in the index (consecutive ids and
// ids 2^k apart), the same rows are present with the right bytes, the evicted ones are gone, and the size stays at
// the capacity; a re-insert keeps one copy; capacity 0 holds nothing.
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "model/ple_row_cache.h"

using namespace strata;

namespace {

constexpr size_t kRowBytes = 90;   // an IQ4_NL row of 160 values

std::vector<uint8_t> row_bytes(uint64_t row) {
    std::vector<uint8_t> b(kRowBytes);
    for (size_t k = 0; k < kRowBytes; ++k) b[k] = (uint8_t)((row * 2654435761u + k * 97u) >> 5);
    return b;
}

// The policy written plainly: slots in fill order, then a hand that clears marks until it finds an unmarked slot.
struct Model {
    size_t cap, hand = 0;
    std::vector<uint64_t> keys;
    std::vector<uint8_t> marked;
    int find(uint64_t row) {
        for (size_t s = 0; s < keys.size(); ++s)
            if (keys[s] == row) {
                marked[s] = 1;
                return (int)s;
            }
        return -1;
    }
    void insert(uint64_t row) {
        for (size_t s = 0; s < keys.size(); ++s)
            if (keys[s] == row) return;
        if (keys.size() < cap) {
            keys.push_back(row);
            marked.push_back(0);
            return;
        }
        while (marked[hand]) {
            marked[hand] = 0;
            hand = (hand + 1) % cap;
        }
        keys[hand] = row;
        marked[hand] = 0;
        hand = (hand + 1) % cap;
    }
};

}  // namespace

int main() {
    for (size_t cap : {1, 7, 300, 5000}) {
        PleRowCache cache(kRowBytes, cap);
        Model model{cap};
        std::mt19937_64 rng(cap);
        // Row ids from a few dense runs and from strided sets: many share index buckets.
        const uint64_t universe = cap * 3 + 10;
        auto pick = [&]() -> uint64_t {
            const uint64_t i = rng() % universe;
            switch (rng() % 3) {
                case 0: return 1000000 + i;                    // consecutive
                case 1: return i << 20;                        // 2^20 apart
                default: return 320000000ull - 1 - i * 4096;   // near the real table's end, 4096 apart
            }
        };
        bool same = true, bytes_ok = true;
        std::string first_bad;
        for (int op = 0; op < 200000 && same && bytes_ok; ++op) {
            const uint64_t row = pick();
            const uint8_t* got = cache.find(row);
            const int want = model.find(row);
            if ((got != nullptr) != (want >= 0)) {
                same = false;
                first_bad = "find of row " + std::to_string(row) + " at op " + std::to_string(op);
                break;
            }
            if (got) {
                const std::vector<uint8_t> b = row_bytes(row);
                for (size_t k = 0; k < kRowBytes; ++k) bytes_ok = bytes_ok && got[k] == b[k];
            } else {
                cache.insert(row, row_bytes(row).data());
                model.insert(row);
            }
            if (rng() % 50 == 0) {   // a re-insert of a present row keeps one copy
                const uint64_t again = model.keys[rng() % model.keys.size()];
                cache.insert(again, row_bytes(again).data());
                model.insert(again);
            }
            same = same && cache.size() == model.keys.size();
        }
        // every row the model holds is found with its bytes (finds mark them in both; the policy stays in step)
        for (uint64_t row : model.keys) {
            const uint8_t* got = cache.find(row);
            const std::vector<uint8_t> b = row_bytes(row);
            bytes_ok = bytes_ok && got;
            for (size_t k = 0; got && k < kRowBytes; ++k) bytes_ok = bytes_ok && got[k] == b[k];
        }
        CHECK_MSG(same, "capacity %zu: the cache holds what the plain CLOCK model holds (%s)", cap, first_bad.c_str());
        CHECK_MSG(bytes_ok, "capacity %zu: every row found has its own bytes", cap);
        CHECK_MSG(cache.size() == std::min<size_t>(cap, cache.size()) && cache.size() == cap,
                  "capacity %zu: full after the run (%zu rows)", cap, cache.size());
    }
    {
        PleRowCache none(kRowBytes, 0);
        none.insert(5, row_bytes(5).data());
        CHECK_MSG(none.find(5) == nullptr && none.size() == 0, "capacity 0 holds nothing");
    }
    CHECK_MSG(PleRowCache::rows_for_bytes(256u << 20, 90) > 2500000, "256 MiB hold over 2.5 million 90-byte rows");
    return test::exit_code();
}
