#include "vision_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "gemm.h"
#include "quant/quant.h"

namespace strata::vision {
namespace {

constexpr const char* kArch = "qwen4exp-vision";

bool float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

std::vector<float> read_f32(GgufFile& f, const std::string& name, int64_t n) {
    const GgufTensor& t = f.tensor(name);
    STRATA_CHECK(float_type(t.type), f.paths()[0], ": tensor ", name, " has type ", ggml_type_name(t.type),
                 " (expected F32, F16 or BF16)");
    STRATA_CHECK(t.n_elements() == n, f.paths()[0], ": tensor ", name, " has ", t.n_elements(),
                 " elements, expected ", n);
    std::vector<float> v((size_t)n);
    dequantize_row(t.type, f.map_tensor(t), v.data(), n);
    return v;
}

Linear read_linear(GgufFile& f, const std::string& name, int64_t n_in, int64_t n_out) {
    const GgufTensor& t = f.tensor(name + ".weight");
    STRATA_CHECK(float_type(t.type), f.paths()[0], ": tensor ", t.name, " has type ", ggml_type_name(t.type),
                 " (expected F32, F16 or BF16)");
    STRATA_CHECK(t.n_dims == 2 && t.ne[0] == n_in && t.ne[1] == n_out, f.paths()[0], ": tensor ", t.name,
                 " has shape ", t.shape_string(), ", expected {", n_in, ", ", n_out, "}");
    Linear l;
    l.type = t.type;
    l.w = f.map_tensor(t);
    l.row_bytes = ggml_row_bytes(t.type, n_in);
    l.n_in = n_in;
    l.n_out = n_out;
    l.bias = read_f32(f, name + ".bias", n_out);
    return l;
}

Norm read_norm(GgufFile& f, const std::string& name, int64_t n) {
    return Norm{read_f32(f, name + ".weight", n), read_f32(f, name + ".bias", n)};
}

int get_int(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
    int64_t v = (int64_t)f.get_uint(key);
    STRATA_CHECK(v >= lo && v <= hi, f.paths()[0], ": ", key, " = ", v, " is out of range ", lo, "..", hi);
    return (int)v;
}

std::vector<double> get_floats(const GgufFile& f, const std::string& key, size_t n) {
    const GgufValue* v = f.find(key);
    STRATA_CHECK(v && v->type == GgufValueType::ARRAY && v->arr_f.size() == n, f.paths()[0], ": ", key,
                 " must be an array of ", n, " floats");
    return v->arr_f;
}

inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); }

}  // namespace

std::unique_ptr<VisionModel> VisionModel::load(const std::string& path, int n_threads) {
    std::unique_ptr<VisionModel> m(new VisionModel());
    m->file_ = GgufFile::open(path);
    GgufFile& f = *m->file_;
    const GgufValue* arch = f.find("general.architecture");
    STRATA_CHECK(arch && arch->type == GgufValueType::STRING && arch->s == kArch, path,
                 ": not a strata vision GGUF (general.architecture is ",
                 arch ? "'" + arch->summary() + "'" : std::string("missing"), ", expected '", kArch,
                 "'; convert the checkpoint with vision/convert_vision.py)");
    STRATA_CHECK(f.get_uint("vision.format_version") == 1, path, ": vision.format_version ",
                 f.get_uint("vision.format_version"), " is not supported (expected 1)");
    VisionHparams& hp = m->hp_;
    hp.depth = get_int(f, "vision.depth", 1, 1024);
    hp.hidden = get_int(f, "vision.hidden_size", 1, 1 << 16);
    hp.ff = get_int(f, "vision.intermediate_size", 1, 1 << 18);
    hp.heads = get_int(f, "vision.num_heads", 1, 1024);
    hp.in_channels = get_int(f, "vision.in_channels", 3, 3);
    hp.patch = get_int(f, "vision.patch_size", 1, 1024);
    hp.temporal_patch = get_int(f, "vision.temporal_patch_size", 1, 64);
    hp.merge = get_int(f, "vision.spatial_merge_size", 1, 64);
    hp.out_hidden = get_int(f, "vision.out_hidden_size", 1, 1 << 18);
    hp.n_pos = get_int(f, "vision.num_position_embeddings", 1, 1 << 24);
    hp.pos_side = (int)std::lround(std::sqrt((double)hp.n_pos));
    STRATA_CHECK(hp.pos_side * hp.pos_side == hp.n_pos, path, ": vision.num_position_embeddings ", hp.n_pos,
                 " is not a square");
    STRATA_CHECK(hp.hidden % hp.heads == 0 && (hp.hidden / hp.heads) % 4 == 0, path, ": hidden_size ", hp.hidden,
                 " / num_heads ", hp.heads, " must be a head dim that is a multiple of 4");
    hp.head_dim = hp.hidden / hp.heads;
    hp.act = f.get_string("vision.hidden_act");
    STRATA_CHECK(hp.act == "gelu_pytorch_tanh" || hp.act == "gelu", path, ": vision.hidden_act '", hp.act,
                 "' is not supported (gelu_pytorch_tanh or gelu)");
    hp.rope_theta = (float)f.get_float("vision.rope_theta");
    hp.ln_eps = (float)f.get_float_or("vision.layer_norm_eps", 1e-6);
    std::vector<double> mean = get_floats(f, "vision.image_mean", 3), sd = get_floats(f, "vision.image_std", 3);
    for (int c = 0; c < 3; ++c) {
        hp.mean[c] = (float)mean[c];
        hp.std[c] = (float)sd[c];
        STRATA_CHECK(hp.std[c] > 0, path, ": vision.image_std must be positive");
    }
    hp.rescale = (float)f.get_float("vision.rescale_factor");
    hp.min_pixels = f.get_uint_or("vision.min_pixels", 0);
    hp.max_pixels = f.get_uint_or("vision.max_pixels", 0);

    const int64_t h = hp.hidden, pdim = (int64_t)hp.in_channels * hp.temporal_patch * hp.patch * hp.patch;
    const int64_t mh = h * hp.merge * hp.merge;
    m->patch_embd_ = read_linear(f, "v.patch_embd", pdim, h);
    m->pos_embd_ = read_f32(f, "v.pos_embd.weight", (int64_t)hp.n_pos * h);
    for (int i = 0; i < hp.depth; ++i) {
        const std::string b = "v.blk." + std::to_string(i) + ".";
        Block blk;
        blk.ln1 = read_norm(f, b + "ln1", h);
        blk.ln2 = read_norm(f, b + "ln2", h);
        blk.qkv = read_linear(f, b + "attn_qkv", h, 3 * h);
        blk.out = read_linear(f, b + "attn_out", h, h);
        blk.up = read_linear(f, b + "ffn_up", h, hp.ff);
        blk.down = read_linear(f, b + "ffn_down", hp.ff, h);
        m->blocks_.push_back(std::move(blk));
    }
    m->merger_ln_ = read_norm(f, "v.merger.ln", h);
    m->merger_fc1_ = read_linear(f, "v.merger.fc1", mh, mh);
    m->merger_fc2_ = read_linear(f, "v.merger.fc2", mh, hp.out_hidden);
    m->pool_ = std::make_unique<ThreadPool>(n_threads);
    return m;
}

void VisionModel::check_size(int width, int height) const {
    const int fct = hp_.factor();
    STRATA_CHECK(width > 0 && height > 0 && width % fct == 0 && height % fct == 0, "image size ", width, "x",
                 height, ": both sides must be multiples of ", fct, " (patch ", hp_.patch, " x merge ", hp_.merge,
                 "); resize with smart_resize first");
    STRATA_CHECK(hp_.max_pixels == 0 || (uint64_t)width * (uint64_t)height <= hp_.max_pixels, "image size ",
                 width, "x", height, " has more than max_pixels ", hp_.max_pixels, " pixels");
}

// y[t][r] = dot(W row r, x[t]) + bias[r]. Jobs are (block of 4 panels of rows) x (chunk of 240 tokens); a job
// packs its rows' weights to f32 panels (once per row block and thread) and runs the micro-kernel over its tokens.
void VisionModel::linear(const Linear& l, const float* x, int64_t n_tok, float* y) {
    const Gemm& g = gemm();
    const int64_t NB = 4 * (int64_t)g.nr, TC = 240, K = l.n_in;
    const int64_t nb = (l.n_out + NB - 1) / NB, nt = (n_tok + TC - 1) / TC;
    pool_->parallel_for(nb * nt, [&](int64_t begin, int64_t end) {
        std::vector<float> pack((size_t)(panels(NB, g.nr) * K * g.nr)), tmp((size_t)K);
        int64_t packed = -1;
        for (int64_t job = begin; job < end; ++job) {
            const int64_t rb = job / nt, r0 = rb * NB, nrow = std::min(NB, l.n_out - r0);
            const int64_t t0 = (job % nt) * TC, t1 = std::min(n_tok, t0 + TC);
            if (packed != rb) {
                pack_weight_rows(l.type, l.w, l.row_bytes, K, r0, nrow, g.nr, pack.data(), tmp.data());
                packed = rb;
            }
            gemm_packed(x + t0 * K, K, t1 - t0, pack.data(), K, nrow, y + t0 * l.n_out + r0, l.n_out);
            for (int64_t t = t0; t < t1; ++t) {
                float* yr = y + t * l.n_out;
                for (int64_t r = r0; r < r0 + nrow; ++r) yr[r] += l.bias[(size_t)r];
            }
        }
    });
}

void VisionModel::layer_norm(const Norm& n, const float* x, int64_t n_tok, int64_t dim, float* y) {
    const float eps = hp_.ln_eps;
    pool_->parallel_for(n_tok, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const float* xr = x + t * dim;
            float* yr = y + t * dim;
            double s = 0;
            for (int64_t i = 0; i < dim; ++i) s += xr[i];
            const double mean = s / (double)dim;
            double v = 0;
            for (int64_t i = 0; i < dim; ++i) v += ((double)xr[i] - mean) * ((double)xr[i] - mean);
            const float inv = (float)(1.0 / std::sqrt(v / (double)dim + (double)eps));
            const float mf = (float)mean;
            for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - mf) * inv * n.weight[(size_t)i] + n.bias[(size_t)i];
        }
    });
}

// Bidirectional multi-head attention over all n_tok patches (one image = one frame = one segment).
// qkv rows are [3][heads][head_dim]; q and k get the 2-D rotary (rotate-half over the full head dim).
void VisionModel::attention(const float* qkv, int64_t n_tok, const std::vector<float>& cos,
                            const std::vector<float>& sin, float* out) {
    const int H = hp_.heads, D = hp_.head_dim, half = D / 2;
    const int64_t hid = hp_.hidden;
    const Gemm& g = gemm();
    std::vector<float> q((size_t)H * n_tok * D), k((size_t)H * n_tok * D), v((size_t)H * n_tok * D);
    pool_->parallel_for(n_tok, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const float* row = qkv + t * 3 * hid;
            const float* c = cos.data() + t * D;
            const float* s = sin.data() + t * D;
            for (int h = 0; h < H; ++h) {
                const float* qs = row + (int64_t)h * D;
                const float* ks = row + hid + (int64_t)h * D;
                const float* vs = row + 2 * hid + (int64_t)h * D;
                float* qd = q.data() + ((size_t)h * n_tok + t) * D;
                float* kd = k.data() + ((size_t)h * n_tok + t) * D;
                float* vd = v.data() + ((size_t)h * n_tok + t) * D;
                for (int j = 0; j < D; ++j) {
                    const float qr = j < half ? -qs[j + half] : qs[j - half];
                    const float kr = j < half ? -ks[j + half] : ks[j - half];
                    qd[j] = qs[j] * c[j] + qr * s[j];
                    kd[j] = ks[j] * c[j] + kr * s[j];
                    vd[j] = vs[j];
                }
            }
        }
    });
    // Per head: K^T as panels over the keys (K = D), V as panels over the head dims (K = n_tok).
    const size_t kp_size = (size_t)(panels(n_tok, g.nr) * D * g.nr), vp_size = (size_t)(panels(D, g.nr) * n_tok * g.nr);
    std::vector<float> kp((size_t)H * kp_size), vp((size_t)H * vp_size);
    pool_->parallel_for(H, [&](int64_t begin, int64_t end) {
        for (int64_t h = begin; h < end; ++h) {
            pack_rows_f32(k.data() + (size_t)h * n_tok * D, D, n_tok, D, g.nr, kp.data() + (size_t)h * kp_size);
            pack_columns(v.data() + (size_t)h * n_tok * D, D, n_tok, D, g.nr, vp.data() + (size_t)h * vp_size);
        }
    });
    constexpr int64_t QB = 48;
    const int64_t nqb = (n_tok + QB - 1) / QB;
    const float scale = (float)(1.0 / std::sqrt((double)D));
    pool_->parallel_for((int64_t)H * nqb, [&](int64_t begin, int64_t end) {
        std::vector<float> sc((size_t)(QB * n_tok)), o((size_t)(QB * D));
        float inv[QB];
        for (int64_t job = begin; job < end; ++job) {
            const int64_t h = job / nqb;
            const int64_t q0 = (job % nqb) * QB, nq = std::min(n_tok, q0 + QB) - q0;
            gemm_packed(q.data() + ((size_t)h * n_tok + q0) * D, D, nq, kp.data() + (size_t)h * kp_size, D, n_tok,
                        sc.data(), n_tok);
            for (int64_t i = 0; i < nq; ++i) {
                float* srow = sc.data() + i * n_tok;
                float mx = -INFINITY;
                for (int64_t j = 0; j < n_tok; ++j) mx = std::max(mx, srow[j]);
                inv[i] = (float)(1.0 / exp_scaled(srow, n_tok, scale, mx * scale));
            }
            gemm_packed(sc.data(), n_tok, nq, vp.data() + (size_t)h * vp_size, n_tok, D, o.data(), D);
            for (int64_t i = 0; i < nq; ++i) {
                float* dst = out + (q0 + i) * hid + h * D;
                for (int j = 0; j < D; ++j) dst[j] = o[(size_t)(i * D + j)] * inv[i];
            }
        }
    });
}

Encoding VisionModel::encode(const RgbImage& img) {
    check_size(img.width, img.height);
    const int P = hp_.patch, M = hp_.merge, T = hp_.temporal_patch, C = hp_.in_channels;
    const int gh = img.height / P, gw = img.width / P, bw = gw / M;
    const int64_t n = (int64_t)gh * gw, pdim = (int64_t)C * T * P * P;
    std::vector<float> patches((size_t)(n * pdim));
    // Patch p in merge-block order: p = ((block_row * bw + block_col) * M + in_row) * M + in_col; its vector is
    // [C][T][P][P] with every frame the same picture (the processor repeats an image to temporal_patch frames).
    for (int64_t p = 0; p < n; ++p) {
        const int in_col = (int)(p % M), in_row = (int)((p / M) % M);
        const int block = (int)(p / (M * M)), row = (block / bw) * M + in_row, col = (block % bw) * M + in_col;
        float* dst = patches.data() + p * pdim;
        for (int c = 0; c < C; ++c) {
            for (int y = 0; y < P; ++y) {
                const uint8_t* src = img.rgb.data() + ((size_t)(row * P + y) * img.width + (size_t)col * P) * 3 + c;
                for (int x = 0; x < P; ++x) {
                    const float v = ((float)src[(size_t)x * 3] * hp_.rescale - hp_.mean[c]) / hp_.std[c];
                    for (int t = 0; t < T; ++t) dst[((c * T + t) * P + y) * P + x] = v;
                }
            }
        }
    }
    return encode_patches(patches.data(), gh, gw);
}

Encoding VisionModel::encode_patches(const float* patches, int gh, int gw) {
    const int M = hp_.merge, D = hp_.head_dim, side = hp_.pos_side;
    STRATA_CHECK(gh > 0 && gw > 0 && gh % M == 0 && gw % M == 0, "patch grid ", gw, "x", gh,
                 " is not a multiple of the merge size ", M);
    const int64_t n = (int64_t)gh * gw, hid = hp_.hidden, bw = gw / M;
    std::vector<int> prow((size_t)n), pcol((size_t)n);
    for (int64_t p = 0; p < n; ++p) {
        const int in_col = (int)(p % M), in_row = (int)((p / M) % M), block = (int)(p / (M * M));
        prow[(size_t)p] = (int)(block / bw) * M + in_row;
        pcol[(size_t)p] = (int)(block % bw) * M + in_col;
    }

    std::vector<float> x((size_t)(n * hid));
    linear(patch_embd_, patches, n, x.data());

    // Learned positions: the side x side table resampled bilinearly (align_corners, border clamp) to gh x gw,
    // in float32 as transformers' get_vision_interpolation_indices_and_weights.
    auto taps = [side](int index, int size, int tap[2], float wt[2]) {
        const float src = ((float)index * (float)(side - 1)) / (float)std::max(size - 1, 1);
        const float fl = std::floor(src);
        for (int o = 0; o < 2; ++o) {
            tap[o] = std::clamp((int)fl + o, 0, side - 1);
            wt[o] = std::max(0.0f, 1.0f - std::fabs(src - fl - (float)o));
        }
    };
    for (int64_t p = 0; p < n; ++p) {
        int ht[2], wt_[2];
        float hw[2], ww[2];
        taps(prow[(size_t)p], gh, ht, hw);
        taps(pcol[(size_t)p], gw, wt_, ww);
        const float* rows[4];
        float wts[4];
        for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) {
                rows[a * 2 + b] = pos_embd_.data() + ((size_t)ht[a] * side + wt_[b]) * hid;
                wts[a * 2 + b] = hw[a] * ww[b];
            }
        float* xr = x.data() + p * hid;
        for (int64_t i = 0; i < hid; ++i) {
            float s = rows[0][i] * wts[0];
            s += rows[1][i] * wts[1];
            s += rows[2][i] * wts[2];
            s += rows[3][i] * wts[3];
            xr[i] += s;
        }
    }

    // 2-D axial rotary: angles [row * f (D/4), col * f (D/4)], duplicated to D; f_j = theta^(-2j / (D/2)).
    const int nf = D / 4, spatial = D / 2;
    std::vector<float> inv_freq((size_t)nf);
    for (int j = 0; j < nf; ++j)
        inv_freq[(size_t)j] = 1.0f / std::pow(hp_.rope_theta, (float)(2 * j) / (float)spatial);
    std::vector<float> cosv((size_t)(n * D)), sinv((size_t)(n * D));
    for (int64_t p = 0; p < n; ++p) {
        for (int j = 0; j < nf; ++j) {
            const float ah = (float)prow[(size_t)p] * inv_freq[(size_t)j];
            const float aw = (float)pcol[(size_t)p] * inv_freq[(size_t)j];
            for (int rep = 0; rep < 2; ++rep) {
                cosv[(size_t)(p * D + rep * spatial + j)] = std::cos(ah);
                sinv[(size_t)(p * D + rep * spatial + j)] = std::sin(ah);
                cosv[(size_t)(p * D + rep * spatial + nf + j)] = std::cos(aw);
                sinv[(size_t)(p * D + rep * spatial + nf + j)] = std::sin(aw);
            }
        }
    }

    std::vector<float> xn((size_t)(n * hid)), qkv((size_t)(n * 3 * hid)), att((size_t)(n * hid));
    std::vector<float> mid((size_t)(n * hp_.ff)), tmp((size_t)(n * hid));
    const bool tanh_act = hp_.act == "gelu_pytorch_tanh";
    for (const Block& blk : blocks_) {
        layer_norm(blk.ln1, x.data(), n, hid, xn.data());
        linear(blk.qkv, xn.data(), n, qkv.data());
        attention(qkv.data(), n, cosv, sinv, att.data());
        linear(blk.out, att.data(), n, tmp.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
        layer_norm(blk.ln2, x.data(), n, hid, xn.data());
        linear(blk.up, xn.data(), n, mid.data());
        pool_->parallel_for((int64_t)mid.size(), [&](int64_t b, int64_t e) {
            if (tanh_act)
                gelu_tanh_inplace(mid.data() + b, e - b);
            else
                for (int64_t i = b; i < e; ++i) mid[(size_t)i] = gelu_erf(mid[(size_t)i]);
        });
        linear(blk.down, mid.data(), n, tmp.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    }

    // Merger: LayerNorm per patch, the M*M patches of a block side by side (they are consecutive), fc1, GELU (erf),
    // fc2: one row per merged block, blocks in row-major order.
    layer_norm(merger_ln_, x.data(), n, hid, xn.data());
    const int64_t nm = n / (M * M), mh = hid * M * M;
    std::vector<float> h1((size_t)(nm * mh));
    linear(merger_fc1_, xn.data(), nm, h1.data());
    for (float& v : h1) v = gelu_erf(v);
    Encoding e;
    e.nx = gw / M;
    e.ny = gh / M;
    e.n_embd = hp_.out_hidden;
    e.rows.resize((size_t)(nm * hp_.out_hidden));
    linear(merger_fc2_, h1.data(), nm, e.rows.data());
    return e;
}

}  // namespace strata::vision
