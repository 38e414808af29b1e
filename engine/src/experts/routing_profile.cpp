// RoutingProfile: counts per (layer, expert), and the text file that carries them between runs.
#include "experts/routing_profile.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace strata {

RoutingProfile::RoutingProfile(int n_layers, int n_experts) : n_layers_(n_layers), n_experts_(n_experts) {
    STRATA_CHECK(n_layers > 0 && n_experts > 0, "routing profile: ", n_layers, " layers × ", n_experts,
                 " experts is not a valid shape");
    counts_.assign((size_t)n_layers * n_experts, 0.0);
}

void RoutingProfile::add(int layer, const int32_t* ids, int n) {
    STRATA_CHECK(layer >= 0 && layer < n_layers_, "routing profile: layer ", layer, " is outside 0..", n_layers_ - 1);
    for (int i = 0; i < n; ++i) {
        STRATA_CHECK(ids[i] >= 0 && ids[i] < n_experts_, "routing profile: expert ", ids[i], " is outside 0..",
                     n_experts_ - 1);
        counts_[(size_t)layer * n_experts_ + ids[i]] += 1.0;
    }
}

void RoutingProfile::add_count(int layer, int expert, double n) {
    STRATA_CHECK(layer >= 0 && layer < n_layers_ && expert >= 0 && expert < n_experts_, "routing profile: (layer ",
                 layer, ", expert ", expert, ") is outside ", n_layers_, " x ", n_experts_);
    counts_[(size_t)layer * n_experts_ + expert] += n;
}

double RoutingProfile::layer_total(int layer) const {
    double s = 0;
    for (int e = 0; e < n_experts_; ++e) s += count(layer, e);
    return s;
}

void RoutingProfile::save(const std::string& path) const {
    std::ofstream f(path);
    STRATA_CHECK(f, "routing profile: cannot write ", path);
    f << "strata-routing-profile 1\nlayers " << n_layers_ << " experts " << n_experts_ << "\n";
    for (int l = 0; l < n_layers_; ++l) {
        for (int e = 0; e < n_experts_; ++e) f << (e ? " " : "") << count(l, e);
        f << "\n";
    }
    f.flush();
    STRATA_CHECK(f, "routing profile: writing ", path, " failed");
}

RoutingProfile RoutingProfile::load(const std::string& path) {
    std::ifstream f(path);
    STRATA_CHECK(f, "routing profile: cannot open ", path);
    std::string magic, w_layers, w_experts;
    int version = 0, layers = 0, experts = 0;
    f >> magic >> version;
    STRATA_CHECK(f && magic == "strata-routing-profile" && version == 1, "routing profile ", path,
                 ": the first line must be 'strata-routing-profile 1'");
    f >> w_layers >> layers >> w_experts >> experts;
    STRATA_CHECK(f && w_layers == "layers" && w_experts == "experts" && layers > 0 && experts > 0, "routing profile ",
                 path, ": the second line must be 'layers L experts E' with positive L and E");
    RoutingProfile p(layers, experts);
    for (int l = 0; l < layers; ++l)
        for (int e = 0; e < experts; ++e) {
            double v = 0;
            f >> v;
            STRATA_CHECK(f, "routing profile ", path, ": layer ", l, " has no count for expert ", e, " (", experts,
                         " per layer expected)");
            STRATA_CHECK(std::isfinite(v) && v >= 0, "routing profile ", path, ": layer ", l, " expert ", e,
                         " has count ", v, ", which is not a non-negative number");
            p.counts_[(size_t)l * experts + e] = v;
        }
    std::string extra;
    STRATA_CHECK(!(f >> extra), "routing profile ", path, ": unexpected text '", extra, "' after ", layers,
                 " layers of counts");
    return p;
}

}  // namespace strata
