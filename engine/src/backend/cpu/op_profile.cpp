#include "backend/cpu/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace strata {

OpProfile::OpProfile() {
    const char* v = std::getenv("STRATA_PROFILE");
    enabled_ = v && v[0] && v[0] != '0';
}

void OpProfile::add(const std::string& op, double seconds, uint64_t bytes) {
    Entry& e = entries_[op];
    ++e.calls;
    e.seconds += seconds;
    e.bytes += bytes;
}

OpProfile::~OpProfile() {
    if (!enabled_ || entries_.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& r : rows) total += r.second.seconds;
    std::fprintf(stderr, "op profile (STRATA_PROFILE): %.3f s in ops\n", total);
    std::fprintf(stderr, "  %-28s %9s %10s %6s %10s\n", "op", "calls", "seconds", "share", "GB/s");
    for (const auto& [name, e] : rows)
        std::fprintf(stderr, "  %-28s %9llu %10.4f %5.1f%% %10.2f\n", name.c_str(), (unsigned long long)e.calls, e.seconds,
                     100.0 * e.seconds / total, e.seconds > 0 ? e.bytes / e.seconds / 1e9 : 0.0);
}

}  // namespace strata
