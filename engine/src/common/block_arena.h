// Best-fit blocks carved out of large segments, split on the way out and merged with free neighbours on the way back:
// the bookkeeping of the CUDA device pool (backend/cuda/device_pool.*), plain C++ so it is tested without a GPU. A pool
// that only keeps released blocks by size ends up holding a block of every size a prompt chunk asked for (its
// per-expert token groups differ layer by layer): 2.3-3.2x the live peak on the H100 (bench/results/
// 2026-12-05-h100-chunks); carving and merging keeps what it holds near the peak.
#pragma once
#include <cstddef>
#include <functional>
#include <map>

namespace strata {

class BlockArena {
public:
    using RawAlloc = std::function<void*(size_t)>;   // nullptr when out of memory
    using RawFree = std::function<void(void*)>;
    // Segments are at least min_segment bytes (a larger request gets a segment of its own, rounded up to the granule).
    BlockArena(RawAlloc alloc, RawFree free, size_t min_segment, size_t granule);
    ~BlockArena();
    BlockArena(const BlockArena&) = delete;
    BlockArena& operator=(const BlockArena&) = delete;

    // A block of at least `bytes` (kAlign-aligned within its segment when segments are); nullptr when the raw
    // allocator fails even after the segments with no live block were given back.
    void* get(size_t bytes);
    void put(void* p);                     // p must come from get()
    size_t release_free_segments();        // gives back segments with no live block; returns their bytes
    size_t block_size(void* p) const;      // the size handed out for a live block

    size_t held_bytes() const { return held_; }   // in segments
    size_t live_bytes() const { return live_; }
    size_t peak_bytes() const { return peak_; }
    void reset_peak() { peak_ = live_; }
    size_t segment_count() const { return segments_.size(); }

    static constexpr size_t kAlign = 512;

private:
    struct Block {
        size_t size;
        char* segment;
        bool free;
    };
    using Blocks = std::map<char*, Block>;
    void add_free(Blocks::iterator it);
    void remove_free(Blocks::iterator it);
    // Takes `size` from the front of free block it (splitting off the rest); returns its address.
    void* take(Blocks::iterator it, size_t size);

    RawAlloc alloc_;
    RawFree free_;
    size_t min_segment_, granule_;
    std::map<char*, size_t> segments_;          // base → bytes
    Blocks blocks_;                             // every block by address (live and free), segments tiled
    std::multimap<size_t, char*> free_by_size_; // free blocks, best fit first
    size_t held_ = 0, live_ = 0, peak_ = 0;
};

}  // namespace strata
