// BlockArena (common/block_arena.h), with malloc as the raw allocator: blocks never overlap (each is filled with its
// own byte and checked), released neighbours merge, free segments go back, best fit reuses held memory, and a
// prompt-like pattern (many sizes, varying layer to layer) keeps what the arena holds near its live peak.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "common/block_arena.h"

using strata::BlockArena;

namespace {
int g_raw = 0;   // segments the raw allocator has out
void* raw_alloc(size_t n) { ++g_raw; return std::malloc(n); }
void raw_free(void* p) { --g_raw; std::free(p); }

struct Live {
    uint8_t* p;
    size_t n;
    uint8_t tag;
};
bool intact(const Live& l) {
    for (size_t i = 0; i < l.n; ++i)
        if (l.p[i] != l.tag) return false;
    return true;
}
}  // namespace

static void test_split_merge_release() {
    {
        BlockArena a(raw_alloc, raw_free, 1 << 20, 64 << 10);
        void* x = a.get(1000);
        void* y = a.get(3000);
        void* z = a.get(500);
        CHECK(a.segment_count() == 1 && a.held_bytes() == (1u << 20));
        CHECK(a.block_size(x) == 1024 && a.block_size(y) == 3072 && a.block_size(z) == 512);
        CHECK((char*)y == (char*)x + 1024 && (char*)z == (char*)y + 3072);   // carved in order
        CHECK(a.live_bytes() == 1024 + 3072 + 512 && a.peak_bytes() == a.live_bytes());
        a.put(y);
        void* w = a.get(2000);                  // best fit: y's hole, not the segment's tail
        CHECK(w == y && a.block_size(w) == 2048);
        a.put(x);
        a.put(w);                               // merges with x (before) and the rest of y's hole (after)
        void* big = a.get(4096);
        CHECK(big == x);                        // x, w and the 1 KiB left of y's hole make one block again
        CHECK(a.release_free_segments() == 0);  // still in use
        a.put(big);
        a.put(z);
        CHECK(a.live_bytes() == 0 && a.release_free_segments() == (1u << 20) && a.segment_count() == 0);
        void* huge = a.get(5 << 20);            // larger than a segment: its own, rounded to the granule
        CHECK(huge && a.held_bytes() == (5u << 20));
        a.put(huge);
    }
    CHECK(g_raw == 0);   // the destructor gave every segment back
}

static void test_random_use() {
    std::mt19937 rng(7);
    BlockArena a(raw_alloc, raw_free, 1 << 20, 64 << 10);
    std::vector<Live> live;
    uint8_t tag = 1;
    for (int step = 0; step < 20000; ++step) {
        if (!live.empty() && (rng() % 100 < 45 || live.size() > 200)) {
            size_t i = rng() % live.size();
            CHECK(intact(live[i]));
            a.put(live[i].p);
            live[i] = live.back();
            live.pop_back();
        } else {
            size_t n = 1 + (rng() % 4 == 0 ? rng() % (3 << 20) : rng() % 20000);
            uint8_t* p = static_cast<uint8_t*>(a.get(n));
            CHECK(p != nullptr && (uintptr_t)p % 16 == 0);
            std::memset(p, tag, n);
            live.push_back({p, n, tag});
            tag = tag == 255 ? 1 : tag + 1;
        }
    }
    for (const Live& l : live) {
        CHECK(intact(l));
        a.put(l.p);
    }
    CHECK(a.live_bytes() == 0);
    a.release_free_segments();
    CHECK(a.segment_count() == 0 && a.held_bytes() == 0);
}

// A prompt chunk's pattern: per layer a few fixed activations, and per expert a group whose size follows the routing
// (different every layer), all released at the layer's end; then the next layer. What is held stays near the peak.
static void test_prompt_pattern_stays_near_the_peak() {
    std::mt19937 rng(3);
    BlockArena a(raw_alloc, raw_free, 32 << 20, 2 << 20);
    for (int layer = 0; layer < 48; ++layer) {
        std::vector<void*> blocks;
        for (size_t n : {size_t(20) << 20, size_t(40) << 20, size_t(8) << 20}) blocks.push_back(a.get(n));
        for (int e = 0; e < 300; ++e) blocks.push_back(a.get(512 * (1 + rng() % 4000)));
        for (size_t i = 0; i < blocks.size(); ++i) a.put(blocks[(i * 7919) % blocks.size()]);
    }
    CHECK_MSG(a.held_bytes() <= a.peak_bytes() * 13 / 10, "held %zu MiB for a peak of %zu MiB", a.held_bytes() >> 20,
              a.peak_bytes() >> 20);
}

int main() {
    test_split_merge_release();
    test_random_use();
    test_prompt_pattern_stays_near_the_peak();
    return test::exit_code();
}
