// Command-line parsing shared by the subcommands: --flag value pairs into a map, with typed getters whose errors
// name the flag.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata {

class Options {
public:
    // flags_with_value: flags that take a value; others are boolean switches. Unknown flags are an error.
    Options(int argc, char** argv, int first, const std::vector<std::string>& flags_with_value,
            const std::vector<std::string>& switches);
    bool has(const std::string& flag) const { return values_.count(flag) > 0; }
    std::string str(const std::string& flag, const std::string& fallback = "") const;
    std::string required(const std::string& flag) const;
    long long integer(const std::string& flag, long long fallback, long long min, long long max) const;
    double real(const std::string& flag, double fallback, double min, double max) const;
    const std::vector<std::string>& positional() const { return positional_; }

private:
    std::map<std::string, std::string> values_;
    std::vector<std::string> positional_;
};

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what);

// The backend named by --backend (cpu, the default, or cuda) with --threads for the CPU one. cuda works only in an
// executable built with the CUDA backend, whose main() sets cuda_backend_factory. The expert-cache flags
// (kGpuFlags: --expert-cache, --vram-reserve-mib, --gpu-experts-max, --cpu-workers, --routing-profile,
// --routing-profile-out, --expert-adapt, --gpu-miss-share) need --backend cuda.
class Backend;
struct GpuOptions;
extern std::unique_ptr<Backend> (*cuda_backend_factory)(const GpuOptions& opt);
extern const std::vector<std::string> kGpuFlags;
std::unique_ptr<Backend> make_backend(const Options& o);
// Tokens a prompt chunk holds (--chunk): by default 256 on the CPU and 2,048 on the GPU, where every chunk reads each
// expert it misses over PCIe once (a 4,096-token prompt on a 12 GB PC: 383 tok/s in chunks of 256, 1,171 in 2,048;
// bench/results/2026-12-05-h100-chunks). With --expert-cache the chunk's activations are kept free beside the cache.
constexpr int kCpuChunk = 256, kCudaChunk = 2048;
int prompt_chunk(const Options& o);

int generate_command(int argc, char** argv);
int info_command(int argc, char** argv);
int grammar_check_command(int argc, char** argv);   // strata grammar-check (docs/grammar.md)
int serve_command(int argc, char** argv);

}  // namespace strata
