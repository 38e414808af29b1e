// MissShareControl (experts/miss_share.h) against a model of the hybrid pass: per MoE layer the GPU's side takes
// g0 + s·m·t_pcie and the CPU's (1 − s)·m·t_cpu for that layer's m missed experts, the layer ends when both have,
// From a start of 0.3 the controller must settle where the pass (its probes included, and a slow drift of the pass
// time as the context grows taken out) is within a few percent of the best fixed share, for machines with PCIe
// faster than the CPU pool, slower, a GPU side much longer than the CPU's, and a CPU fast enough that nothing
// should go over PCIe. MissShareBalance, fed each pass with the number of layers that waited for the CPU, must get
// there within 40 passes from any start, also when the CPU side's time of a layer varies by ±30%.
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
// jitter: the CPU side of a layer takes up to ± that fraction more or less (the pool's speed varies from layer to
// layer); cpu_late: the layers whose join waited for the CPU.
double run_pass(const Machine& m, double s, std::mt19937& rng, double jitter = 0, int* cpu_late = nullptr) {
    double ns = 0;
    double carry = 0;
    if (cpu_late) *cpu_late = 0;
    for (int l = 0; l < 48; ++l) {
        const int misses = 2 + (int)(rng() % 5);
        const double want = s * misses + carry;
        int zc = (int)(want + 0.5);
        zc = zc < 0 ? 0 : zc > misses ? misses : zc;
        carry = want - zc;
        const double noise = 1 + jitter * (2.0 * (double)(rng() % 1001) / 1000.0 - 1);
        const double gpu = m.g0_ns + zc * m.pcie_ns, cpu = (misses - zc) * m.cpu_ns * noise;
        ns += 5000 + (gpu > cpu ? gpu : cpu);   // 5 µs: the mixer before the routing is known
        if (cpu_late && cpu > gpu) ++*cpu_late;
    }
    return ns;
}

double mean_pass_at(const Machine& m, double s, double jitter = 0) {
    std::mt19937 rng(3);
    double sum = 0;
    for (int i = 0; i < 400; ++i) sum += run_pass(m, s, rng, jitter);
    return sum / 400;
}

double best_fixed_share(const Machine& m, double jitter, double& best) {
    best = 1e30;
    double best_s = 0;
    for (int i = 0; i <= 100; ++i) {
        const double t = mean_pass_at(m, i / 100.0, jitter);
        if (t < best) best = t, best_s = i / 100.0;
    }
    return best_s;
}

// MissShareBalance from its start (0.5) and from both ends: after 40 passes the mean pass is within 5% of the best
// fixed share's, with the rates the host would measure (bytes cancel: one expert over its time).
void check_balance(const char* name, const Machine& m, double jitter) {
    double best;
    const double best_s = best_fixed_share(m, jitter, best);
    for (double start : {0.5, 0.0, 1.0}) {
        strata::MissShareBalance ctl;
        ctl.share = start;
        std::mt19937 rng(5);
        double tail = 0;
        for (int pass = 0; pass < 200; ++pass) {
            int late = 0;
            const double ns = run_pass(m, ctl.share, rng, jitter, &late);
            if (pass >= 40) tail += ns;
            ctl.update(48, late, 1 / m.cpu_ns, 1 / m.pcie_ns);
            CHECK(ctl.share >= 0 && ctl.share <= 1);
        }
        tail /= 160;
        std::printf("balance, %s, jitter %.2f, from %.1f: settled at %.2f (best fixed share %.2f), pass %.3f of the best\n",
                    name, jitter, start, ctl.share, best_s, tail / best);
        CHECK_MSG(tail <= best * 1.05, "balance %s from %.1f: settled at %.2f, %.0f ns a pass; best %.2f: %.0f ns", name,
                  start, ctl.share, tail, best_s, best);
    }
}

void check_settles(const char* name, const Machine& m) {
    double best;
    const double best_s = best_fixed_share(m, 0, best);
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
    for (double jitter : {0.0, 0.3}) {
        check_balance("PCIe faster than the CPU pool (H200 host)", {60000, 38000, 69000}, jitter);
        check_balance("PCIe slower (a PC on PCIe 4.0)", {60000, 55000, 35000}, jitter);
        check_balance("a GPU side much longer than the CPU's", {100000, 30000, 30000}, jitter);
        check_balance("a slow CPU", {30000, 20000, 60000}, jitter);
        check_balance("a fast CPU", {60000, 40000, 9000}, jitter);
    }
    MissShareControl ctl;   // faster above: the share climbs to 1 and stays in 0..1; faster below: down to 0
    for (int i = 0; i < 400; ++i) ctl.update(ctl.next() > ctl.share ? 1e6 : 1.1e6);
    CHECK(ctl.share >= 0.9 && ctl.next() <= 1.0);
    for (int i = 0; i < 400; ++i) ctl.update(ctl.next() < ctl.share ? 1e6 : 1.1e6);
    CHECK(ctl.share <= 0.1 && ctl.next() >= 0.0);
    return test::exit_code();
}
