// Per-op wall time of a backend, on when STRATA_PROFILE=1: calls, seconds and weight bytes per op and weight type,
// printed to stderr when the backend is destroyed. Costs one branch per op when off.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace strata {

class OpProfile {
public:
    OpProfile();
    ~OpProfile();
    bool enabled() const { return enabled_; }
    void add(const std::string& op, double seconds, uint64_t bytes);

    class Scope {
    public:
        Scope(OpProfile& p, const char* op, const char* detail = nullptr, uint64_t bytes = 0)
            : p_(p), op_(op), detail_(detail), bytes_(bytes) {
            if (p_.enabled_) t0_ = std::chrono::steady_clock::now();
        }
        ~Scope() {
            if (!p_.enabled_) return;
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
            p_.add(detail_ ? std::string(op_) + " " + detail_ : std::string(op_), s, bytes_);
        }
    private:
        OpProfile& p_;
        const char* op_;
        const char* detail_;
        uint64_t bytes_;
        std::chrono::steady_clock::time_point t0_;
    };

private:
    struct Entry { uint64_t calls = 0; double seconds = 0; uint64_t bytes = 0; };
    bool enabled_ = false;
    std::map<std::string, Entry> entries_;
};

}  // namespace strata
