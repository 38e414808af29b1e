#include "common/block_arena.h"

#include <algorithm>

#include "common/error.h"

namespace strata {

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

BlockArena::BlockArena(RawAlloc alloc, RawFree free, size_t min_segment, size_t granule)
    : alloc_(std::move(alloc)), free_(std::move(free)), min_segment_(min_segment), granule_(granule) {
    STRATA_CHECK(granule_ >= kAlign && granule_ % kAlign == 0 && min_segment_ % granule_ == 0,
                 "block arena: granule ", granule_, ", segment ", min_segment_);
}

BlockArena::~BlockArena() {
    for (auto& [base, bytes] : segments_) free_(base);
}

void BlockArena::add_free(Blocks::iterator it) {
    it->second.free = true;
    free_by_size_.emplace(it->second.size, it->first);
}

void BlockArena::remove_free(Blocks::iterator it) {
    auto [lo, hi] = free_by_size_.equal_range(it->second.size);
    for (auto f = lo; f != hi; ++f)
        if (f->second == it->first) {
            free_by_size_.erase(f);
            break;
        }
    it->second.free = false;
}

void* BlockArena::take(Blocks::iterator it, size_t size) {
    remove_free(it);
    Block& b = it->second;
    if (b.size - size >= kAlign) {   // the rest stays free
        auto rest = blocks_.emplace(it->first + size, Block{b.size - size, b.segment, true}).first;
        free_by_size_.emplace(rest->second.size, rest->first);
        b.size = size;
    }
    live_ += b.size;
    peak_ = std::max(peak_, live_);
    return it->first;
}

void* BlockArena::get(size_t bytes) {
    const size_t size = round_up(std::max<size_t>(bytes, 1), kAlign);
    auto best = free_by_size_.lower_bound(size);
    if (best != free_by_size_.end()) return take(blocks_.find(best->second), size);
    const size_t seg = std::max(min_segment_, round_up(size, granule_));
    char* base = static_cast<char*>(alloc_(seg));
    if (!base && release_free_segments() > 0) base = static_cast<char*>(alloc_(seg));
    if (!base) return nullptr;
    segments_.emplace(base, seg);
    held_ += seg;
    auto it = blocks_.emplace(base, Block{seg, base, false}).first;
    add_free(it);
    return take(it, size);
}

void BlockArena::put(void* p) {
    auto it = blocks_.find(static_cast<char*>(p));
    STRATA_CHECK(it != blocks_.end() && !it->second.free, "block arena: a release of a block it did not hand out");
    live_ -= it->second.size;
    // Merge with the free neighbours of the same segment.
    auto next = std::next(it);
    if (next != blocks_.end() && next->second.free && next->second.segment == it->second.segment) {
        remove_free(next);
        it->second.size += next->second.size;
        blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
        auto prev = std::prev(it);
        if (prev->second.free && prev->second.segment == it->second.segment) {
            remove_free(prev);
            prev->second.size += it->second.size;
            blocks_.erase(it);
            it = prev;
        }
    }
    add_free(it);
}

size_t BlockArena::release_free_segments() {
    size_t released = 0;
    for (auto s = segments_.begin(); s != segments_.end();) {
        auto it = blocks_.find(s->first);
        if (it != blocks_.end() && it->second.free && it->second.size == s->second) {
            remove_free(it);
            blocks_.erase(it);
            free_(s->first);
            held_ -= s->second;
            released += s->second;
            s = segments_.erase(s);
        } else {
            ++s;
        }
    }
    return released;
}

size_t BlockArena::block_size(void* p) const {
    auto it = blocks_.find(static_cast<char*>(p));
    STRATA_CHECK(it != blocks_.end() && !it->second.free, "block arena: not a live block");
    return it->second.size;
}

}  // namespace strata
