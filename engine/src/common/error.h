// strata::Error: the one exception type for bad input (files, keys, request lines, values).
// Messages say what is wrong, which value, and what was expected. STRATA_ASSERT is for internal invariants only.
#pragma once
#include <stdexcept>
#include <string>
#include <sstream>

namespace strata {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void cat(std::ostringstream&) {}
template <typename T, typename... R>
void cat(std::ostringstream& os, const T& v, const R&... rest) { os << v; cat(os, rest...); }
}  // namespace detail

// Builds a message from pieces: fmt("tensor ", name, " has ", n, " dims").
template <typename... A>
std::string fmt(const A&... a) { std::ostringstream os; detail::cat(os, a...); return os.str(); }

template <typename... A>
[[noreturn]] void fail(const A&... a) { throw Error(fmt(a...)); }

}  // namespace strata

#define STRATA_CHECK(cond, ...) do { if (!(cond)) ::strata::fail(__VA_ARGS__); } while (0)
#define STRATA_ASSERT(cond) do { if (!(cond)) ::strata::fail("internal error: ", #cond, " at ", __FILE__, ":", __LINE__); } while (0)
