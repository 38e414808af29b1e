// Minimal test helpers for the engine's ctest executables: CHECK records a failure and keeps going;
// main() returns test_exit_code(). Named tolerances live in tolerance.h.
#pragma once
#include <cmath>
#include <cstdio>

namespace test {
inline int& failures() { static int n = 0; return n; }
inline int exit_code() {
    if (failures()) std::fprintf(stderr, "%d check(s) failed\n", failures());
    return failures() ? 1 : 0;
}
}  // namespace test

#define CHECK(cond) do { if (!(cond)) { ++test::failures(); \
    std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { if (!(cond)) { ++test::failures(); \
    std::fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    std::fprintf(stderr, __VA_ARGS__); std::fputc('\n', stderr); } } while (0)
