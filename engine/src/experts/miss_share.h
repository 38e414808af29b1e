// The zero-copy share of the device-driven hybrid join (--gpu-miss-share auto), tuned while decoding. Per MoE layer
// the GPU reads its share of the missed experts over PCIe while the CPU pool computes the rest; the layer ends when
// both are done, so the pass time against the share is a V whose bottom depends on the PC's PCIe and DRAM speeds
// and on the hit rate. Two controllers, plain C++ that the CPU tests drive (STRATA_SHARE_CONTROL picks,
// hybrid_moe.cu): MissShareBalance (the default, below) steers by which side each layer waited for;
// MissShareControl (climb) probes both sides of its share in turn (a block of passes a little above, one a little
// below, the order swapped every pair so a slow drift of the pass time, as the context grows, cancels) and steps
// towards the faster side; the step grows while the direction holds and shrinks when it turns. Passes far slower
// than usual (the first of a request after idle time) are not counted. On the H200 the balance controller decoded
// 90.8 / 90.6 / 93.4 tok/s where the prober gave 88.9 / 84.1 / 91.4 (bench/results/2026-12-03-h200, r17).
#pragma once

namespace strata {

class MissShareControl {
public:
    double share = 0.3;   // the centre the probes go around (the start; then the current estimate)

    // The share the next pass runs at.
    double next() const {
        const double probe = share < kProbe ? (share > kProbeMin ? share : kProbeMin) : kProbe;
        const double v = share + (high_phase() ? probe : -probe);
        return v < 0 ? 0 : v > 1 ? 1 : v;
    }
    // The wall time of the pass that ran at next().
    void update(double pass_ns) {
        if (pass_ns <= 0) return;
        if (typical_ns_ > 0 && pass_ns > 2.5 * typical_ns_) return;
        typical_ns_ = typical_ns_ > 0 ? 0.9 * typical_ns_ + 0.1 * pass_ns : pass_ns;
        (high_phase() ? high_ns_ : low_ns_) += pass_ns;
        if (++n_ < 2 * kBlock) return;
        const int dir = high_ns_ < low_ns_ ? 1 : -1;   // both blocks have kBlock passes
        if (dir == last_dir_) step_ = step_ * 2 > kStepMax ? kStepMax : step_ * 2;
        else if (last_dir_ != 0) step_ = step_ / 2 < kStepMin ? kStepMin : step_ / 2;
        last_dir_ = dir;
        share += dir * step_;
        share = share < 0 ? 0 : share > 1 ? 1 : share;
        n_ = 0;
        high_ns_ = low_ns_ = 0;
        ++pair_;
    }

private:
    static constexpr int kBlock = 6;   // passes per probe block
    static constexpr double kProbe = 0.04, kProbeMin = 0.01;   // ± around the share (smaller near 0)
    static constexpr double kStepMin = 0.01, kStepMax = 0.08;
    bool high_phase() const { return (n_ < kBlock) == (pair_ % 2 == 0); }
    int n_ = 0, pair_ = 0, last_dir_ = 0;
    double high_ns_ = 0, low_ns_ = 0, typical_ns_ = 0, step_ = 0.02;
};

// The zero-copy share set from which side each layer's join waited for. In a MoE layer with missed experts the pass
// goes on when the later of the GPU side (its cached experts and the share it reads over PCIe) and the CPU side (the
// rest) is done. Moving a little share δ to the GPU lengthens every layer the GPU finished last by δ·m/W_pcie and
// shortens every layer the CPU finished last by δ·m/W_cpu (m: the layer's missed bytes), so the pass is shortest
// where the CPU finishes last in a fraction W_cpu / (W_cpu + W_pcie) of those layers, whatever the noise on either
// side. Each pass moves the share by kGain × (the fraction measured in it − that target): one number a pass from
// the joins, no probing, so it settles in tens of passes (MissShareControl: hundreds).
class MissShareBalance {
public:
    double share = 0.5;   // the GPU's share of each layer's missed experts (place_pairs)

    // The fraction of layers with misses in which the CPU should finish last.
    static double target(double cpu_bytes_per_s, double pcie_bytes_per_s) {
        if (!(cpu_bytes_per_s > 0) || !(pcie_bytes_per_s > 0)) return 0.5;
        return cpu_bytes_per_s / (cpu_bytes_per_s + pcie_bytes_per_s);
    }
    // One pass: of its miss_layers layers with missed experts, cpu_late of them waited for the CPU. The rates: the
    // CPU pool's and the GPU's zero-copy reads, bytes a second.
    void update(int miss_layers, int cpu_late, double cpu_bytes_per_s, double pcie_bytes_per_s) {
        if (miss_layers <= 0) return;
        const double f = (double)cpu_late / miss_layers;
        share += kGain * (f - target(cpu_bytes_per_s, pcie_bytes_per_s));
        share = share < 0 ? 0 : share > 1 ? 1 : share;
    }

private:
    static constexpr double kGain = 0.03;
};

}  // namespace strata
