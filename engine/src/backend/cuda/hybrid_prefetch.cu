// HybridMoe's side of the prefetch of predicted misses (expert_prefetch.h): its memory, the worker's launch at each
// pass boundary and its statistics. The copy-engine mode's thread is in hybrid_prefetch_dma.cu.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_moe.h"
#include "common/error.h"
#include "common/log.h"

namespace strata::cuda {

namespace {
bool env_off(const char* name) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, "0") == 0;
}
}  // namespace

void HybridMoe::prepare_prefetch() {
    const int L_n = (int)layers_.size();
    const int H = (int)layers_[0].gate.ne[0];
    if (env_off("STRATA_PREFETCH")) return;
    std::string why;
    if (!zc_stage_[0]) why = "no staging slots";
    for (int l = 0; l < L_n && why.empty(); ++l)
        if (!zero_copy_[l][0]) why = "not every layer's experts can be read zero-copy";
    if (why.empty() && (int)routers_.size() != L_n) why = "the routers are not known";
    if (why.empty() && (H % 4 != 0 || H > kPrefetchMaxH || n_experts_ > kPrefetchMaxExperts))
        why = "the shape is out of the worker's range";
    int with_router = 0;
    for (const float* r : routers_) with_router += r != nullptr;
    if (why.empty() && with_router == 0) why = "no F32 router";
    if (!why.empty()) {
        log_info("experts", "no prefetch of predicted misses: " + why);
        return;
    }
    if (const char* v = std::getenv("STRATA_PREFETCH_BLOCKS")) pf_blocks_ = std::max(1, std::min(64, std::atoi(v)));
    pf_after_stage_ = !env_off("STRATA_PREFETCH_AFTER_STAGE");
    if (const char* v = std::getenv("STRATA_PREFETCH_DEPTH")) pf_depth_ = std::max(1, std::min(4, std::atoi(v)));
    if (const char* v = std::getenv("STRATA_PREFETCH_COPIES")) pf_copies_ = std::max(0, std::min(kPrefetchSlots, std::atoi(v)));
    if (const char* v = std::getenv("STRATA_PREFETCH_MODE")) pf_dma_ = std::strcmp(v, "dma") == 0;
    if (pf_dma_ && !std::getenv("STRATA_PREFETCH_COPIES")) pf_copies_ = 3;   // (~the window at the copy engine's rate)
    bool ok = cudaMalloc(&pf_board_, sizeof(PrefetchBoard)) == cudaSuccess &&
              cudaMalloc(&pf_x_, (size_t)2 * H * sizeof(float)) == cudaSuccess &&
              cudaMalloc(&pf_logits_, (size_t)n_experts_ * sizeof(float)) == cudaSuccess &&
              cudaMalloc(&pf_layers_, L_n * sizeof(PrefetchLayer)) == cudaSuccess;
    for (int m = 0; m < 3 && ok; ++m) {   // (the staging slots' stride: their matrices are whole 16-byte words)
        void* d = nullptr;
        ok = cudaMalloc(&d, stage_stride_[m] * 2 * kPrefetchSlots) == cudaSuccess;
        pf_area_[m] = static_cast<uint8_t*>(d);
    }
    if (!ok) {
        cudaGetLastError();
        free_prefetch();
        log_info("experts", "no prefetch of predicted misses: no VRAM for its slots");
        return;
    }
    CUDA_CHECK(cudaMemset(pf_board_, 0, sizeof(PrefetchBoard)));
    CUDA_CHECK(cudaMemset(pf_x_, 0, (size_t)2 * H * sizeof(float)));
    std::vector<PrefetchLayer> layers(L_n);
    for (int l = 0; l < L_n; ++l) {
        const Layer& L = layers_[l];
        layers[l] = PrefetchLayer{routers_[l], {zero_copy_[l][0], zero_copy_[l][1], zero_copy_[l][2]},
                                  {L.gate_bytes, L.up_bytes, L.down_bytes}};
    }
    CUDA_CHECK(cudaMemcpy(pf_layers_, layers.data(), L_n * sizeof(PrefetchLayer), cudaMemcpyHostToDevice));
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, sizeof(PrefetchWords), cudaHostAllocMapped));
    std::memset(p, 0, sizeof(PrefetchWords));
    pf_words_ = static_cast<PrefetchWords*>(p);
    CUDA_CHECK(cudaHostGetDevicePointer(&p, pf_words_, 0));
    pf_words_dev_ = static_cast<PrefetchWords*>(p);
    CUDA_CHECK(cudaStreamCreateWithFlags(&pf_stream_, cudaStreamNonBlocking));
    if (pf_dma_ && !start_prefetch_dma()) pf_dma_ = false;   // (it says why)
    prefetch_on_ = true;
    log_info("experts", fmt("prefetch of predicted misses: the next layer's routing scored from each layer's input, up to ",
                            pf_copies_, " of its ", kPrefetchCandidates, " best uncached experts copied over PCIe ",
                            pf_after_stage_ || pf_dma_ ? "after" : "during", " each layer's staging (",
                            pf_dma_ ? std::string("by the copy engine, a pick kernel of ") + std::to_string(pf_blocks_) +
                                          " blocks a layer"
                                    : fmt(pf_blocks_, " blocks, ", pf_depth_, " loads in flight a thread"),
                            ", ", (stage_stride_[0] + stage_stride_[1] + stage_stride_[2]) * 2 * kPrefetchSlots >> 20,
                            " MiB of slots; ", with_router, " of ", L_n, " routers)"));
}

PrefetchWorkerArgs HybridMoe::prefetch_args() const {
    PrefetchWorkerArgs a{};
    a.board = pf_board_;
    a.x = pf_x_;
    a.logits = pf_logits_;
    a.words = pf_words_dev_;
    a.tag = pf_tag_;
    a.n_layers = (int)layers_.size();
    a.E = n_experts_;
    a.H = (int)layers_[0].gate.ne[0];
    a.layers = pf_layers_;
    a.slot_map = slot_map_gpu_;
    for (int m = 0; m < 3; ++m) {
        a.area[m] = pf_area_[m];
        a.stride[m] = stage_stride_[m];
    }
    a.after_stage = pf_after_stage_;
    a.max_copies = pf_copies_;
    a.depth = pf_depth_;
    return a;
}

// The running worker leaves once it reads the stop word (stream order keeps the next one behind it). The
// copy-engine mode has no worker: its thread runs from start to end.
void HybridMoe::launch_prefetch() {
    if (!prefetch_on_ || pf_dma_) return;
    __atomic_store_n(&pf_words_->stop, pf_tag_, __ATOMIC_RELEASE);
    ++pf_tag_;
    if (pf_tag_ == 0) ++pf_tag_;   // (0 is the stop word's initial value)
    launch_prefetch_worker(pf_stream_, prefetch_args(), pf_blocks_);
}

void HybridMoe::stop_prefetch() {
    if (!pf_stream_) return;
    if (pf_dma_) {
        stop_prefetch_dma();
        return;
    }
    __atomic_store_n(&pf_words_->stop, pf_tag_, __ATOMIC_RELEASE);
    const cudaError_t e = cudaStreamSynchronize(pf_stream_);   // (also from the destructor: no throw)
    if (e != cudaSuccess) log_warn("experts", fmt("prefetch worker: ", cudaGetErrorString(e)));
}

void HybridMoe::free_prefetch() {
    stop_prefetch();
    for (cudaStream_t* st : {&pf_stream_, &pf_copy_stream_})
        if (*st) {
            cudaStreamDestroy(*st);
            *st = nullptr;
        }
    if (pf_copies_done_) cudaEventDestroy(pf_copies_done_);
    pf_copies_done_ = nullptr;
    if (pf_pick_) cudaFreeHost(pf_pick_);
    pf_pick_ = pf_pick_dev_ = nullptr;
    prefetch_on_ = false;
    cudaFree(pf_board_);
    cudaFree(pf_x_);
    cudaFree(pf_logits_);
    cudaFree(pf_layers_);
    for (uint8_t*& a : pf_area_) {
        cudaFree(a);
        a = nullptr;
    }
    if (pf_words_) cudaFreeHost(pf_words_);
    pf_board_ = nullptr;
    pf_x_ = pf_logits_ = nullptr;
    pf_layers_ = nullptr;
    pf_words_ = pf_words_dev_ = nullptr;
}

std::string HybridMoe::prefetch_summary() const {
    if (!prefetch_on_) return "prefetch off";
    const PrefetchWords& w = *pf_words_;
    const auto pct = [](unsigned long long a, unsigned long long b) { return b ? (int)(1000.0 * a / b) / 10.0 : 0.0; };
    const std::string copies =
        pf_dma_ ? fmt(w.copied, " experts queued on the copy engine (", w.copied_bytes >> 20, " MiB), ", w.aborted,
                      " layers skipped (a late pick, or the last layer's copies still running)")
                : fmt(w.copied, " experts copied, ", w.aborted, " dropped or cut short (the next plan came first)");
    const std::string rate = pf_dma_ ? std::string()
                                     : fmt("; copies ", w.copy_ns / 1000000, " ms at ",
                                           w.copy_ns ? (int)(10.0 * w.copied_bytes / w.copy_ns) / 10.0 : 0.0,
                                           " GB/s (", w.copied_bytes >> 20, " MiB published)");
    return fmt("prefetch: ", w.requests, " predictions, ", copies, "; of ", w.miss_pairs, " pairs missed in the cache ",
               w.predicted_pairs, " (", pct(w.predicted_pairs, w.miss_pairs), "%) were among the candidates and ",
               w.used_pairs, " (", pct(w.used_pairs, w.miss_pairs), "%) ran on prefetched copies", rate);
}

}  // namespace strata::cuda
