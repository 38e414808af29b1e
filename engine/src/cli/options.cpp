#include "cli/options.h"

#include <algorithm>
#include <cstdint>

#include "common/error.h"

namespace strata {

Options::Options(int argc, char** argv, int first, const std::vector<std::string>& flags_with_value,
                 const std::vector<std::string>& switches) {
    auto in = [](const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); };
    for (int i = first; i < argc; ++i) {
        std::string a = argv[i];
        if (a.size() > 1 && a[0] == '-') {
            if (in(switches, a)) { values_[a] = "1"; continue; }
            if (!in(flags_with_value, a)) fail("unknown option ", a);
            if (i + 1 >= argc) fail("option ", a, " needs a value");
            values_[a] = argv[++i];
        } else {
            positional_.push_back(a);
        }
    }
}

std::string Options::str(const std::string& flag, const std::string& fallback) const {
    auto it = values_.find(flag);
    return it == values_.end() ? fallback : it->second;
}

std::string Options::required(const std::string& flag) const {
    auto it = values_.find(flag);
    if (it == values_.end()) fail("missing required option ", flag);
    return it->second;
}

long long Options::integer(const std::string& flag, long long fallback, long long min, long long max) const {
    auto it = values_.find(flag);
    if (it == values_.end()) return fallback;
    size_t used = 0;
    long long v = 0;
    try { v = std::stoll(it->second, &used); } catch (...) { used = 0; }
    if (used != it->second.size()) fail("option ", flag, " needs an integer, got '", it->second, "'");
    if (v < min || v > max) fail("option ", flag, " must be between ", min, " and ", max, ", got ", v);
    return v;
}

double Options::real(const std::string& flag, double fallback, double min, double max) const {
    auto it = values_.find(flag);
    if (it == values_.end()) return fallback;
    size_t used = 0;
    double v = 0;
    try { v = std::stod(it->second, &used); } catch (...) { used = 0; }
    if (used != it->second.size() || !(v == v)) fail("option ", flag, " needs a number, got '", it->second, "'");
    if (v < min || v > max) fail("option ", flag, " must be between ", min, " and ", max, ", got ", it->second);
    return v;
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what) {
    std::vector<int32_t> ids;
    std::string cur;
    auto flush = [&] {
        if (cur.empty()) return;
        size_t used = 0;
        long long v = -1;
        try { v = std::stoll(cur, &used); } catch (...) { used = 0; }
        if (used != cur.size() || v < 0 || v > INT32_MAX) fail(what, ": '", cur, "' is not a token id");
        ids.push_back((int32_t)v);
        cur.clear();
    };
    for (char c : text) {
        if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') flush();
        else cur += c;
    }
    flush();
    return ids;
}

}  // namespace strata
