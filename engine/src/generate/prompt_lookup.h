// Drafts for greedy speculation taken from the text itself (prompt lookup, as llama.cpp's lookup decoding and vLLM's
// n-gram speculator): when the last few tokens occurred earlier in the session, the tokens that followed them then
// are proposed, and one pass verifies them. Code edits, quoted documents and tool results repeat a lot of their
// context, so drafts there are often right; elsewhere nothing is proposed. Plain C++ (engine/tests/test_prompt_lookup).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace strata {

// Up to n tokens that followed the most recent earlier occurrence of ctx's last g tokens, for the longest g from
// max_ngram down to min_ngram that has one; empty when none does. The draft stops before any of `stops`.
inline std::vector<int32_t> lookup_drafts(std::span<const int32_t> ctx, int n, std::span<const int32_t> stops = {},
                                          int min_ngram = 2, int max_ngram = 4) {
    std::vector<int32_t> out;
    const int L = (int)ctx.size();
    if (n <= 0) return out;
    for (int g = max_ngram; g >= min_ngram; --g) {
        if (L <= g) continue;
        const int32_t* suffix = ctx.data() + L - g;
        for (int i = L - g - 1; i >= 0; --i) {   // earlier occurrences, the latest first (they may overlap the suffix)
            int j = 0;
            while (j < g && ctx[i + j] == suffix[j]) ++j;
            if (j < g) continue;
            for (int k = i + g; k < L && (int)out.size() < n; ++k) {
                bool stop = false;
                for (int32_t s : stops) stop = stop || ctx[k] == s;
                if (stop) break;
                out.push_back(ctx[k]);
            }
            if (!out.empty()) return out;
        }
    }
    return out;
}

}  // namespace strata
