// MissShareControl (experts/miss_share.h) against a model of the hybrid pass: per MoE layer the GPU's side takes
// g0 + s·m·t_pcie and the CPU's (1 − s)·m·t_cpu for that layer's m missed experts, the layer ends when both have,
// From a start of 0.3 the controller must settle where the pass (its probes included, and a slow drift of the pass
// time as the context grows taken out) is within a few percent of the best fixed share, for machines with PCIe
// faster than the CPU pool, slower, a GPU side much longer than the CPU's, and a CPU fast enough that nothing
// should go over PCIe.
#include <random>
#include <vector>

#include "check.h"
#include "experts/miss_share.h"

using strata::MissShareControl;

namespace {

struct Machine {
    double g0_ns;      // the GPU's own work of a layer (mixer, router, cached experts)
    double pcie_ns;    // one missed expert read zero-copy
    double cpu_ns;     // one missed expert on the CPU pool
};

// One pass of 48 layers at share s: its time (ns). Misses per layer vary as routing does (2..6), and each layer
// rounds its zero-copy count with a carry, as place_pairs does.
double run_pass(const Machine& m, double s, std::mt19937& rng) {
    double ns = 0;
    double carry = 0;
    for (int l = 0; l < 48; ++l) {
        const int misses = 2 + (int)(rng() % 5);
        const double want = s * misses + carry;
        int zc = (int)(want + 0.5);
        zc = zc < 0 ? 0 : zc > misses ? misses : zc;
        carry = want - zc;
        const double gpu = m.g0_ns + zc * m.pcie_ns, cpu = (misses - zc) * m.cpu_ns;
        ns += 5000 + (gpu > cpu ? gpu : cpu);   // 5 µs: the mixer before the routing is known
    }
    return ns;
}

double mean_pass_at(const Machine& m, double s) {
    std::mt19937 rng(3);
    double sum = 0;
    for (int i = 0; i < 400; ++i) sum += run_pass(m, s, rng);
    return sum / 400;
}

void check_settles(const char* name, const Machine& m) {
    double best = 1e30, best_s = 0;
    for (int i = 0; i <= 100; ++i) {
        const double t = mean_pass_at(m, i / 100.0);
        if (t < best) best = t, best_s = i / 100.0;
    }
    MissShareControl ctl;
    std::mt19937 rng(5);
    double tail = 0;
    for (int pass = 0; pass < 800; ++pass) {
        const double s = ctl.next();
        CHECK(s >= 0 && s <= 1);
        const double ns = run_pass(m, s, rng);
        if (pass >= 500) tail += ns;
        ctl.update(ns * (1 + 0.0003 * pass));   // the pass slows as the context grows
        if (pass % 97 == 0) ctl.update(ns * 40);   // the first pass after idle time: not counted
    }
    tail /= 300;
    std::printf("%s: settled at %.2f (best fixed share %.2f), pass %.3f of the best\n", name, ctl.share, best_s, tail / best);
    CHECK_MSG(tail <= best * 1.05, "%s: settled at share %.2f, %.0f ns a pass; best fixed share %.2f: %.0f ns", name,
              ctl.share, tail, best_s, best);
}

}  // namespace

int main() {
    check_settles("PCIe faster than the CPU pool (H200 host)", {60000, 38000, 69000});
    check_settles("PCIe slower (a PC on PCIe 4.0)", {60000, 55000, 35000});
    check_settles("a GPU side much longer than the CPU's", {100000, 30000, 30000});
    check_settles("a slow CPU", {30000, 20000, 60000});
    check_settles("a fast CPU", {60000, 40000, 9000});
    MissShareControl ctl;   // faster above: the share climbs to 1 and stays in 0..1; faster below: down to 0
    for (int i = 0; i < 400; ++i) ctl.update(ctl.next() > ctl.share ? 1e6 : 1.1e6);
    CHECK(ctl.share >= 0.9 && ctl.next() <= 1.0);
    for (int i = 0; i < 400; ++i) ctl.update(ctl.next() < ctl.share ? 1e6 : 1.1e6);
    CHECK(ctl.share <= 0.1 && ctl.next() >= 0.0);
    return test::exit_code();
}
