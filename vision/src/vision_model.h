// The qwen4_exp vision tower on the CPU: what transformers' Qwen4ExpVisionModel computes for one image
// (patch embed, interpolated learned positions, pre-LN ViT blocks with 2-D axial rotary, the 2x2 patch merger),
// plus the image processor's rescale / normalize / patchify. Weights are read from the GGUF of
// vision/convert_vision.py (layout: vision/README.md) and used in place (F32, F16 or BF16).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "gguf/gguf_file.h"
#include "ppm.h"

namespace strata::vision {

struct VisionHparams {
    int depth = 0, hidden = 0, ff = 0, heads = 0, head_dim = 0, in_channels = 3;
    int patch = 0, temporal_patch = 0, merge = 0, out_hidden = 0, n_pos = 0, pos_side = 0;
    std::string act;                 // gelu_pytorch_tanh or gelu (blocks' MLP)
    float rope_theta = 10000.0f, ln_eps = 1e-6f;
    float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1}, rescale = 1.0f / 255.0f;
    uint64_t min_pixels = 0, max_pixels = 0;
    int factor() const { return patch * merge; }   // image sides must be multiples of this
};

// A weight matrix used in place: n_out rows of n_in values in the file's type, plus its F32 bias.
struct Linear {
    GgmlType type = GgmlType::F32;
    const uint8_t* w = nullptr;
    size_t row_bytes = 0;
    int64_t n_in = 0, n_out = 0;
    std::vector<float> bias;
};

struct Norm {
    std::vector<float> weight, bias;
};

struct Block {
    Norm ln1, ln2;
    Linear qkv, out, up, down;
};

struct Encoding {
    int nx = 0, ny = 0;          // merged grid: patch columns / merge, patch rows / merge
    int n_embd = 0;
    std::vector<float> rows;     // nx*ny rows of n_embd; row i at merged (column i % nx, row i / nx)
};

class VisionModel {
public:
    // Throws strata::Error on a file that is not a vision GGUF of our layout.
    static std::unique_ptr<VisionModel> load(const std::string& path, int n_threads);
    const VisionHparams& hparams() const { return hp_; }

    // Checks the picture's size against the model (sides multiples of patch*merge, at most max_pixels).
    void check_size(int width, int height) const;
    // rescale + normalize + patchify as the image processor, then the encoder.
    Encoding encode(const RgbImage& img);
    // The encoder on patches already in the processor's layout: n_patches rows of in_channels*temporal*patch^2
    // values, in merge-block order, for a patch grid of grid_h x grid_w.
    Encoding encode_patches(const float* patches, int grid_h, int grid_w);

private:
    VisionModel() = default;
    void linear(const Linear& l, const float* x, int64_t n_tok, float* y);
    void layer_norm(const Norm& n, const float* x, int64_t n_tok, int64_t dim, float* y);
    void attention(const float* qkv, int64_t n_tok, const std::vector<float>& cos, const std::vector<float>& sin,
                   float* out);

    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<ThreadPool> pool_;
    VisionHparams hp_;
    Linear patch_embd_;
    std::vector<float> pos_embd_;   // n_pos x hidden, F32
    std::vector<Block> blocks_;
    Norm merger_ln_;
    Linear merger_fc1_, merger_fc2_;
};

}  // namespace strata::vision
