// GraphBackend (backend/graph_backend.h) over the CPU reference with a capture double that keeps no graphs: each
// recorded run is issued again at its flush. On the shipped demo model it must then give the plain CPU backend's
// logits bit for bit over a prompt, decode steps (dense QSA attention, then selected cells past the 2048-token
// budget) and verify windows; and the signatures of decode steps must repeat (on a GPU, a signature that changes
// every pass would mean a fresh capture every pass).
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/graph_backend.h"
#include "check.h"
#include "model/qwen4exp.h"
#include "model/session.h"

using namespace strata;

namespace {

class NoGraphsCapture : public CpuBackend, public GraphCapture {
public:
    NoGraphsCapture() : CpuBackend(2) {}
    GraphCapture* graph_capture() override { return this; }
    void capture_begin(size_t) override { ++captures; }
    Exec capture_end() override { return this; }
    bool launch(Exec, const std::vector<Upload>&) override { return false; }
    void destroy(Exec) override {}
    bool moe_on_host(int, int) const override { return false; }
    int captures = 0;
};

int argmax(const std::vector<float>& v) { return (int)(std::max_element(v.begin(), v.end()) - v.begin()); }

// Runs the same token schedule on `be` and returns every logits row it produced, in order.
std::vector<std::vector<float>> run(Backend& be, const char* path) {
    Qwen4Exp model(path, be);
    const Hparams& hp = model.hparams();
    std::vector<std::vector<float>> out;
    auto step = [&](Session& s, const std::vector<int32_t>& ids) {
        std::vector<float> logits((size_t)ids.size() * hp.n_vocab);
        model.forward(s, ids.data(), (int)ids.size(), Qwen4Exp::Outputs{logits.data(), true, nullptr});
        out.push_back(logits);
        return argmax(std::vector<float>(logits.end() - hp.n_vocab, logits.end()));
    };
    auto prompt = [&](int n, int seed) {
        std::vector<int32_t> ids(n);
        for (int i = 0; i < n; ++i) ids[i] = 3 + (seed + 37 * i + i * i / 7) % (hp.n_vocab - 3);
        return ids;
    };
    {   // short context: dense attention in every QSA layer; T = 1 steps, then verify windows of 3
        Session s(be, hp, 256);
        int next = step(s, prompt(40, 1));
        for (int i = 0; i < 12; ++i) next = step(s, {next});
        for (int i = 0; i < 3; ++i) next = step(s, {next, (next + 1) % hp.n_vocab, (next + 5) % hp.n_vocab});
    }
    {   // multimodal (GENI): a 4 × 3 image's rows at prompt tokens 10 … 21 with M-RoPE positions (rope_multi, block
        // keys rotated at their first token's 3-D position); decoding continues at the session's rope_next
        Session s(be, hp, 256);
        const int n = 40, i0 = 10, nx = 4, ny = 3, H = hp.n_embd;
        const std::vector<int32_t> ids = prompt(n, 3);
        std::vector<float> rows((size_t)nx * ny * H);
        for (size_t k = 0; k < rows.size(); ++k) rows[k] = 0.05f * (float)((k * 7919) % 41) - 1.0f;
        std::vector<std::array<int32_t, 3>> pos(n);
        std::vector<const float*> row_of(n, nullptr);
        int32_t c = 0;
        for (int i = 0; i < n; ++i) {
            if (i >= i0 && i < i0 + nx * ny) {
                const int r = i - i0;
                pos[i] = {i0, i0 + r / nx, i0 + r % nx};
                row_of[i] = rows.data() + (size_t)r * H;
                c = i0 + std::max(nx, ny);
            } else {
                pos[i] = {c, c, c};
                ++c;
            }
        }
        const Qwen4Exp::Media media{pos.data(), row_of.data(), nullptr, c};
        std::vector<float> logits((size_t)n * hp.n_vocab);
        model.forward(s, ids.data(), n, Qwen4Exp::Outputs{logits.data(), true, nullptr}, &media);
        out.push_back(logits);
        int next = argmax(std::vector<float>(logits.end() - hp.n_vocab, logits.end()));
        for (int i = 0; i < 12; ++i) next = step(s, {next});
        for (int i = 0; i < 3; ++i) next = step(s, {next, (next + 1) % hp.n_vocab, (next + 5) % hp.n_vocab});
    }
#ifndef STRATA_SANITIZED   // a 2,112-token prompt takes minutes on the sanitizer build; the Release build runs it
    {   // past the indexer budget: selected cells (indexer_scores and select_cells, recorded like every other op)
        const int ctx = 2048 + 64;
        Session s(be, hp, ctx + 16);
        const std::vector<int32_t> ids = prompt(ctx, 2);
        int next = 0;
        for (int p = 0; p < ctx; p += 512) next = step(s, std::vector<int32_t>(ids.begin() + p, ids.begin() + std::min(ctx, p + 512)));
        for (int i = 0; i < 8; ++i) next = step(s, {next});
    }
#endif
    return out;
}

}  // namespace

int main() {
    const char* path = STRATA_SOURCE_DIR "/installer/demo/strata-demo.gguf";
    CpuBackend plain(2);
    const auto want = run(plain, path);

    auto inner = std::make_unique<NoGraphsCapture>();
    NoGraphsCapture* fake = inner.get();
    GraphBackend graphs(std::move(inner));
    // Every pass's logits bit for bit as the plain CPU backend gave them.
    auto check_same = [&](const std::vector<std::vector<float>>& got, const char* what) {
        CHECK(got.size() == want.size());
        for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
            CHECK_MSG(got[i].size() == want[i].size() &&
                          std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)) == 0,
                      "pass %zu (%s): logits differ from the plain CPU backend", i, what);
    };
    check_same(run(graphs, path), "split into pieces");
    // 12 + 3 + 8 short passes recorded; decode steps at one shape must mostly repeat a signature seen before. No op
    // runs directly any more: the select passes' scores and cell choice read the positions from memory.
    const GraphBackend::Counts c = graphs.counts();
    std::printf("graph runs: %lld seen before, %lld new; %lld direct ops; %zu signatures kept\n", (long long)c.launches,
                (long long)c.captures, (long long)c.direct_ops, graphs.cached_graphs());
    CHECK(c.captures == fake->captures);
    CHECK_MSG(c.launches >= 2 * c.captures, "%lld repeated runs for %lld new signatures", (long long)c.launches,
              (long long)c.captures);
    CHECK_MSG(c.direct_ops == 0, "%lld ops ran directly", (long long)c.direct_ops);

    // The same with each pass in one piece (STRATA_GRAPH_SPLIT=0): the same logits, and fewer runs than the default
    // split ("32,192": a decode pass of the demo's ~100 ops is two runs), so the split above did happen.
#ifdef _WIN32
    _putenv_s("STRATA_GRAPH_SPLIT", "0");
#else
    setenv("STRATA_GRAPH_SPLIT", "0", 1);
#endif
    GraphBackend whole(std::make_unique<NoGraphsCapture>());
    // the split's spelling: commas or colons (a decode bench setting's value cannot hold commas)
    CHECK(GraphBackend::parse_split("32:192:400") == (std::vector<size_t>{32, 192, 400}));
    CHECK(GraphBackend::parse_split("32,192") == (std::vector<size_t>{32, 192}));
    check_same(run(whole, path), "one piece a pass");
    const GraphBackend::Counts w = whole.counts();
    std::printf("one piece a pass: %lld seen before, %lld new\n", (long long)w.launches, (long long)w.captures);
    CHECK_MSG(c.launches + c.captures > w.launches + w.captures, "split runs %lld, whole runs %lld",
              (long long)(c.launches + c.captures), (long long)(w.launches + w.captures));
    return test::exit_code();
}
