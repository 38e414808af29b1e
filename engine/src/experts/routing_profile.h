// How often each routed expert of each layer was chosen: written by `--routing-profile-out F` from the experts the
// engine routed, read by `--routing-profile F` to fill the GPU expert cache at start. A text file:
//   strata-routing-profile 1
//   layers L experts E
//   then L lines of E counts (layer 0 first, expert 0 first on each line)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class RoutingProfile {
public:
    RoutingProfile(int n_layers, int n_experts);
    static RoutingProfile load(const std::string& path);   // errors name the file, line and value at fault
    void save(const std::string& path) const;

    int n_layers() const { return n_layers_; }
    int n_experts() const { return n_experts_; }
    // Adds one routing per id (n ids of one layer).
    void add(int layer, const int32_t* ids, int n);
    void add_count(int layer, int expert, double n);   // n more routings of one expert
    double count(int layer, int expert) const { return counts_[(size_t)layer * n_experts_ + expert]; }
    double layer_total(int layer) const;

private:
    int n_layers_, n_experts_;
    std::vector<double> counts_;   // [layer · E + expert]
};

}  // namespace strata
