// torch_topk_indices (topk.h) rewritten without the standard library, so a GPU kernel can make the same choice
// among exact ties: the same heap (k·64 ≤ n) and introselect (otherwise) steps as libstdc++, element by element.
// Compiles as host and device code; engine/tests/test_topk_exact.cpp checks it against topk.h.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif

namespace strata::topk_exact {

struct Elem {
    float v;
    int32_t i;
};

// The comparator of topk.h: a before b when a's value is larger (indices never compared).
STRATA_HD inline bool greater(const Elem& a, const Elem& b) { return a.v > b.v; }

STRATA_HD inline void swap(Elem& a, Elem& b) {
    const Elem t = a;
    a = b;
    b = t;
}

// libstdc++ __push_heap / __adjust_heap / __make_heap / __pop_heap with comp = greater.
STRATA_HD inline void push_heap(Elem* first, int hole, int top, Elem value) {
    int parent = (hole - 1) / 2;
    while (hole > top && greater(first[parent], value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

STRATA_HD inline void adjust_heap(Elem* first, int hole, int len, Elem value) {
    const int top = hole;
    int child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (greater(first[child], first[child - 1])) child--;
        first[hole] = first[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        first[hole] = first[child - 1];
        hole = child - 1;
    }
    push_heap(first, hole, top, value);
}

STRATA_HD inline void make_heap(Elem* first, int len) {
    if (len < 2) return;
    for (int parent = (len - 2) / 2;; --parent) {
        adjust_heap(first, parent, len, first[parent]);
        if (parent == 0) return;
    }
}

// Moves *first to *result and re-heaps [first, first + len) with result's old value.
STRATA_HD inline void pop_heap_into(Elem* first, int len, Elem* result) {
    const Elem value = *result;
    *result = *first;
    adjust_heap(first, 0, len, value);
}

STRATA_HD inline void move_median_to_first(Elem* result, Elem* a, Elem* b, Elem* c) {
    if (greater(*a, *b)) {
        if (greater(*b, *c)) swap(*result, *b);
        else if (greater(*a, *c)) swap(*result, *c);
        else swap(*result, *a);
    } else if (greater(*a, *c)) {
        swap(*result, *a);
    } else if (greater(*b, *c)) {
        swap(*result, *c);
    } else {
        swap(*result, *b);
    }
}

STRATA_HD inline Elem* unguarded_partition(Elem* first, Elem* last, const Elem* pivot) {
    while (true) {
        while (greater(*first, *pivot)) ++first;
        --last;
        while (greater(*pivot, *last)) --last;
        if (!(first < last)) return first;
        swap(*first, *last);
        ++first;
    }
}

STRATA_HD inline void insertion_sort(Elem* first, Elem* last) {
    if (first == last) return;
    for (Elem* i = first + 1; i != last; ++i) {
        const Elem val = *i;
        if (greater(val, *first)) {
            for (Elem* p = i; p != first; --p) *p = *(p - 1);
            *first = val;
        } else {
            Elem* hole = i;
            Elem* next = i - 1;
            while (greater(val, *next)) {
                *hole = *next;
                hole = next;
                --next;
            }
            *hole = val;
        }
    }
}

STRATA_HD inline int floor_log2(int n) {
    int r = 0;
    while (n > 1) { n >>= 1; ++r; }
    return r;
}

// std::nth_element(first, nth, last, greater): libstdc++ __introselect.
STRATA_HD inline void nth_element(Elem* first, Elem* nth, Elem* last) {
    if (first == last || nth == last) return;
    int depth = floor_log2((int)(last - first)) * 2;
    while (last - first > 3) {
        if (depth == 0) {
            // __heap_select(first, nth + 1, last), then the nth element to its place
            const int len = (int)(nth + 1 - first);
            make_heap(first, len);
            for (Elem* i = nth + 1; i < last; ++i)
                if (greater(*i, *first)) pop_heap_into(first, len, i);
            swap(*first, *nth);
            return;
        }
        --depth;
        Elem* mid = first + (last - first) / 2;
        move_median_to_first(first, first + 1, mid, last - 1);
        Elem* cut = unguarded_partition(first + 1, last, first);
        if (cut <= nth) first = cut;
        else last = cut;
    }
    insertion_sort(first, last);
}

// The k indices torch_topk_indices(v, n, k) returns, in its order. q: scratch of n elements (k for the heap path).
STRATA_HD inline void topk(const float* v, int n, int k, Elem* q, int32_t* out) {
    if (k <= 0) return;
    if ((int64_t)k * 64 <= n) {
        for (int j = 0; j < k; ++j) q[j] = {v[j], j};
        make_heap(q, k);
        for (int j = k; j < n; ++j) {
            const Elem e = {v[j], j};
            if (greater(e, q[0])) {
                // std::pop_heap then overwrite the back and std::push_heap
                if (k > 1) pop_heap_into(q, k - 1, q + k - 1);
                q[k - 1] = e;
                push_heap(q, k - 1, 0, e);
            }
        }
    } else {
        for (int j = 0; j < n; ++j) q[j] = {v[j], j};
        nth_element(q, q + k - 1, q + n);
    }
    for (int j = 0; j < k; ++j) out[j] = q[j].i;
}

}  // namespace strata::topk_exact
