// PleRowCache: slots filled in order until the capacity, then reused by a CLOCK hand; an open-addressing index with
// linear probing maps a row to its slot.
#include "model/ple_row_cache.h"

#include <algorithm>
#include <cstring>

namespace strata {

namespace {
constexpr size_t kFirstSlots = 1024;   // bytes_ starts this large and doubles up to the capacity
uint64_t mix(uint64_t x) {             // splitmix64's finalizer: table rows of one head are consecutive
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
}  // namespace

PleRowCache::PleRowCache(size_t row_bytes, size_t capacity_rows)
    : row_bytes_(row_bytes), cap_(std::min<size_t>(capacity_rows, kEmpty - 1)) {}

size_t PleRowCache::rows_for_bytes(size_t bytes, size_t row_bytes) { return bytes / (row_bytes + 17); }

size_t PleRowCache::probe_start(uint64_t row) const { return (size_t)mix(row) & (index_.size() - 1); }

size_t PleRowCache::locate(uint64_t row) const {
    const size_t mask = index_.size() - 1;
    size_t i = probe_start(row);
    while (index_[i] != kEmpty && keys_[index_[i]] != row) i = (i + 1) & mask;
    return i;
}

const uint8_t* PleRowCache::find(uint64_t row) {
    if (used_ == 0) return nullptr;
    const uint32_t s = index_[locate(row)];
    if (s == kEmpty) return nullptr;
    referenced_[s] = 1;
    return bytes_.get() + (size_t)s * row_bytes_;
}

void PleRowCache::erase_entry(size_t i) {
    const size_t mask = index_.size() - 1;
    for (size_t j = (i + 1) & mask; index_[j] != kEmpty; j = (j + 1) & mask) {
        const size_t k = probe_start(keys_[index_[j]]);
        // Entry j may move back to the gap at i unless its probe starts cyclically inside (i, j].
        const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            index_[i] = index_[j];
            i = j;
        }
    }
    index_[i] = kEmpty;
}

void PleRowCache::grow_index() {
    index_.assign(std::max<size_t>(64, index_.size() * 2), kEmpty);
    for (size_t s = 0; s < used_; ++s) index_[locate(keys_[s])] = (uint32_t)s;
}

void PleRowCache::insert(uint64_t row, const uint8_t* bytes) {
    if (cap_ == 0) return;
    size_t s;
    if (used_ && index_[locate(row)] != kEmpty) {   // already here: the same bytes (rows never change)
        s = index_[locate(row)];
    } else if (used_ < cap_) {
        s = used_++;
        if (s == bytes_slots_) {   // room for more slots: double, up to the capacity
            const size_t n = std::min(cap_, std::max(kFirstSlots, 2 * bytes_slots_));
            std::unique_ptr<uint8_t[]> grown(new uint8_t[n * row_bytes_]);
            if (bytes_slots_) std::memcpy(grown.get(), bytes_.get(), bytes_slots_ * row_bytes_);
            bytes_ = std::move(grown);
            bytes_slots_ = n;
        }
        keys_.push_back(row);
        referenced_.push_back(0);
        if (2 * used_ > index_.size()) grow_index();   // keeps the index at most half full
        else index_[locate(row)] = (uint32_t)s;
    } else {
        // CLOCK: the first slot not found since the hand last passed it (each one passed loses its mark).
        while (referenced_[hand_]) {
            referenced_[hand_] = 0;
            hand_ = (hand_ + 1) % cap_;
        }
        s = hand_;
        hand_ = (hand_ + 1) % cap_;
        erase_entry(locate(keys_[s]));
        keys_[s] = row;
        referenced_[s] = 0;   // a row read once goes before rows found again
        index_[locate(row)] = (uint32_t)s;
    }
    std::memcpy(bytes_.get() + s * row_bytes_, bytes, row_bytes_);
}

}  // namespace strata
