// `strata generate`: greedy token ids for a prompt of ids; speeds on stderr; optional raw logits for tests.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "backend/cpu/cpu_backend.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/platform.h"
#include "experts/gpu_options.h"
#include "gguf/gguf_file.h"
#include "model/mtp_head.h"
#include "model/qwen4exp_generator.h"
#include "model/session.h"
#include "serve/image_embeddings.h"

namespace strata {

std::unique_ptr<Backend> (*cuda_backend_factory)(const GpuOptions& opt) = nullptr;

const std::vector<std::string> kGpuFlags = {"--expert-cache", "--vram-reserve-mib", "--gpu-experts-max", "--cpu-workers",
                                            "--routing-profile", "--routing-profile-out", "--expert-adapt",
                                            "--gpu-miss-share"};

// --kv f32 | f16 | q8 | auto: the format of the QSA key and value caches (backend/kv_format.h). auto (the default):
// on the CUDA backend fp16 up to a 4K context and q8 beyond (PRODUCT.md §4; both checked against the CPU on an H100,
// bench/results/2026-12-05-h100-spec), f32 on the CPU backend (the reference). STRATA_KV sets the default (an A/B in
// bench/decode.py's settings: pc12+STRATA_KV=f32).
constexpr int kKvAutoF16Ctx = 4096;
static KvType kv_type_from(const Options& o, int n_ctx) {
    const char* env = std::getenv("STRATA_KV");
    const std::string kv = o.str("--kv", env && *env ? env : "auto");
    KvType t = KvType::f32;
    if (kv == "auto") {
        if (o.str("--backend", "cpu") != "cuda") return KvType::f32;
        return n_ctx <= kKvAutoF16Ctx ? KvType::f16 : KvType::q8;
    }
    if (!parse_kv_type(kv, t)) fail("--kv must be f32, f16, q8 or auto, got '", kv, "'");
    return t;
}

// The context the session will have (--ctx, or the model's default).
static int context_from(const Options& o) {
    return pick_context(Hparams::from_gguf(*GgufFile::open(o.required("--model"))), (int)o.integer("--ctx", 0, 0, 1 << 24));
}

// What the engine allocates on the device after the expert cache is sized at model load: the session's state for the
// context (KV caches and indexer keys of the attention layers: 55.5 KiB a token for the published shape, so 1.7 GiB
// at 32K; with --kv f16 the K and V caches take half, with q8 about a quarter) and, with --mtp, the MTP head's weights (its 512 experts too) and KV,
// and with speculation the rollback copy of the recurrent state. The cache leaves it free besides
// --vram-reserve-mib; before 2026-12-05 it came out of that reserve, which a 12 GB card at 32K overran.
static uint64_t context_device_bytes(const Options& o) {
    const Hparams hp = Hparams::from_gguf(*GgufFile::open(o.required("--model")));
    const int n_ctx = pick_context(hp, (int)o.integer("--ctx", 0, 0, 1 << 24));
    const KvType kv = kv_type_from(o, n_ctx);
    uint64_t bytes = Session::device_floats(hp, n_ctx, kv) * sizeof(float);
    if (o.has("--mtp")) bytes += MtpHead::device_bytes(o.str("--mtp"), n_ctx, kv);
    // Speculation's rollback point: a device copy of the recurrent state (Session::mark; ~115 MB published)
    if (o.has("--mtp") || o.integer("--spec-lookup", 0, 0, 8) > 0) bytes += Session::recurrent_floats(hp) * sizeof(float);
    return bytes;
}

int prompt_chunk(const Options& o) {
    return (int)o.integer("--chunk", o.str("--backend", "cpu") == "cuda" ? kCudaChunk : kCpuChunk, 1, 1 << 20);
}

// A prompt chunk's activations and op scratch on the GPU: measured 0.21-0.22 MiB a chunk token for the published shape
// (n·H = 10,240; bench/results/2026-12-05-h100-chunks), i.e. ~5.4 rows of n·H floats; 6 rows keep a margin.
static uint64_t chunk_device_bytes(const Options& o) {
    const Hparams hp = Hparams::from_gguf(*GgufFile::open(o.required("--model")));
    return (uint64_t)prompt_chunk(o) * 6 * hp.hc_dim() * sizeof(float);
}

static std::unique_ptr<Backend> with_kv_type(std::unique_ptr<Backend> be, const Options& o) {
    be->set_kv_type(kv_type_from(o, context_from(o)));
    return be;
}

std::unique_ptr<Backend> make_backend(const Options& o) {
    const std::string name = o.str("--backend", "cpu");
    if (name == "cpu") {
        for (const std::string& f : kGpuFlags)
            if (o.has(f) && f != "--routing-profile-out") fail(f, " needs --backend cuda (the expert cache lives on the GPU)");
        // Workers are pinned one per physical core (the default count leaves one core free) unless --no-pin.
        // The CPU backend's context lives in RAM: one that cannot fit is refused here (Linux would otherwise grant it
        // and end the engine with the OOM killer once it is touched).
        const uint64_t context = context_device_bytes(o);
        const int64_t avail = platform::available_memory_bytes();
        if (avail >= 0 && context > (uint64_t)avail) {
            const int n_ctx = context_from(o);
            fail("the context of --ctx ", n_ctx, " tokens needs ", context >> 20, " MiB of RAM, but ", avail >> 20,
                 " MiB are available: use a smaller --ctx", kv_type_from(o, n_ctx) == KvType::q8 ? "" : " or --kv q8");
        }
        auto cpu = std::make_unique<CpuBackend>((int)o.integer("--threads", 0, 0, 1024), !o.has("--no-pin"),
                                                o.has("--f32-activations"));
        if (o.has("--routing-profile-out")) cpu->record_routing(o.str("--routing-profile-out"));
        return with_kv_type(std::move(cpu), o);
    }
    if (name == "cuda") {
        if (!cuda_backend_factory) fail("--backend cuda: this strata was built without CUDA (configure with -DSTRATA_CUDA=ON)");
        GpuOptions g;
        g.f32_activations = o.has("--f32-activations");
        g.expert_cache = o.str("--expert-cache");
        if (o.has("--expert-cache") && g.expert_cache.empty()) fail("--expert-cache needs a value: auto, N-slots or N-GiB");
        g.vram_reserve_mib = o.integer("--vram-reserve-mib", g.vram_reserve_mib, 0, 1 << 24);
        g.gpu_experts_max = o.integer("--gpu-experts-max", -1, 0, 1LL << 40);
        g.cpu_workers = (int)o.integer("--cpu-workers", 0, 0, 1024);
        g.routing_profile = o.str("--routing-profile");
        g.routing_profile_out = o.str("--routing-profile-out");
        g.adapt.every_passes = (int)o.integer("--expert-adapt", g.adapt.every_passes, 0, 1 << 20);
        if (o.str("--gpu-miss-share") != "auto") g.gpu_miss_share = o.real("--gpu-miss-share", g.gpu_miss_share, 0, 1);
        if (!g.expert_cache.empty()) g.context_reserve_bytes = context_device_bytes(o) + chunk_device_bytes(o);
        if (g.expert_cache.empty())
            for (const char* f : {"--vram-reserve-mib", "--gpu-experts-max", "--cpu-workers", "--routing-profile",
                                  "--expert-adapt", "--gpu-miss-share"})
                if (o.has(f)) fail(f, " needs --expert-cache (without it every expert is uploaded)");
        return with_kv_type(cuda_backend_factory(g), o);
    }
    fail("--backend must be cpu or cuda, got '", name, "'");
}

int generate_command(int argc, char** argv) {
    std::vector<std::string> flags = {"--model", "--backend", "--threads", "--ctx", "--prompt-ids", "--prompt-file", "-n",
                                      "--logits-out", "--chunk", "--mtp", "--spec", "--draft-min-p", "--mtp-logits-out", "--spec-lookup",
                                      "--images", "--kv"};
    flags.insert(flags.end(), kGpuFlags.begin(), kGpuFlags.end());
    Options o(argc, argv, 2, flags, {"--ignore-eos", "--f32-activations", "--no-pin"});
    const std::string model_path = o.required("--model");
    std::vector<int32_t> prompt;
    if (o.has("--prompt-ids")) {
        prompt = parse_id_list(o.str("--prompt-ids"), "--prompt-ids");
    } else if (o.has("--prompt-file")) {
        std::ifstream f(o.str("--prompt-file"));
        if (!f) fail("--prompt-file: cannot open ", o.str("--prompt-file"));
        std::stringstream ss;
        ss << f.rdbuf();
        prompt = parse_id_list(ss.str(), "--prompt-file");
    } else {
        fail("give the prompt with --prompt-ids 1,2,3 or --prompt-file F");
    }
    if (prompt.empty()) fail("the prompt has no token ids");
    const int n_new = (int)o.integer("-n", 16, 0, 1 << 24);

    std::unique_ptr<Backend> be = make_backend(o);
    Qwen4Exp model(model_path, *be);
    Qwen4ExpGenerator gen(model, (int)o.integer("--ctx", 0, 0, 1 << 24), prompt_chunk(o));
    if (o.has("--mtp")) gen.enable_speculation(o.str("--mtp"), (int)o.integer("--spec", 3, 1, 8));
    else if (o.has("--spec") || o.has("--mtp-logits-out") || o.has("--draft-min-p"))
        fail("--spec, --draft-min-p and --mtp-logits-out need --mtp MTP.gguf");
    if (o.has("--mtp") && o.has("--spec-lookup")) fail("--spec-lookup is for a model without --mtp");
    gen.enable_lookup((int)o.integer("--spec-lookup", 0, 0, 8));
    gen.set_draft_min_p((float)o.real("--draft-min-p", kDefaultDraftMinP, 0.0, 1.0));
    if (o.has("--logits-out") && o.has("--spec-lookup"))
        fail("--logits-out cannot be combined with --spec-lookup (drafted tokens have no single-step logits)");
    if (o.has("--logits-out") && o.has("--mtp")) fail("--logits-out cannot be combined with --mtp (drafted tokens have no single-step logits)");
    for (int32_t id : prompt)
        if (id >= gen.vocab_size()) fail("--prompt-ids: token id ", id, " is outside the vocabulary of ", gen.vocab_size());
    if ((int)prompt.size() + n_new > gen.context_length())
        fail("prompt (", prompt.size(), ") + ", n_new, " new tokens exceed the context of ", gen.context_length(),
             "; raise --ctx");

    std::FILE* logits_out = nullptr;
    if (o.has("--logits-out")) {
        logits_out = std::fopen(o.str("--logits-out").c_str(), "wb");
        if (!logits_out) fail("--logits-out: cannot write ", o.str("--logits-out"));
    }
    const std::vector<int32_t> stops = gen.stop_ids();
    const bool ignore_eos = o.has("--ignore-eos");

    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    if (o.has("--images")) {
        // GENI's embeddings file (SVE1): its images replace the prompt's <|image_pad|> runs.
        if (gen.image_token_id() < 0) fail("--images: the model names no <|image_pad|> token");
        gen.prepare_prompt(prompt, place_images(prompt, gen.image_token_id(),
                                                read_image_embeddings(o.str("--images"), gen.embedding_width()),
                                                o.str("--images")));
    }
    be->reset_memory_peak();
    const Backend::MemoryUse mem0 = be->memory_use();
    const float* logits = gen.append(prompt, nullptr, nullptr);
    auto t1 = clock::now();
    const Backend::MemoryUse mem1 = be->memory_use();
    const Backend::ExpertCacheCounts c1 = be->expert_cache_counts();
    if (o.has("--mtp-logits-out")) {
        std::vector<float> draft = gen.mtp_logits_of_session();
        std::FILE* f = std::fopen(o.str("--mtp-logits-out").c_str(), "wb");
        if (!f) fail("--mtp-logits-out: cannot write ", o.str("--mtp-logits-out"));
        std::fwrite(draft.data(), sizeof(float), draft.size(), f);
        std::fclose(f);
        logits = gen.last_logits();
    }
    std::vector<int32_t> out;
    int offered = 0, accepted = 0, passes = 0;
    while ((int)out.size() < n_new) {
        if (logits_out) std::fwrite(logits, sizeof(float), (size_t)gen.vocab_size(), logits_out);
        int32_t best = 0;
        for (int v = 1; v < gen.vocab_size(); ++v)
            if (logits[v] > logits[best]) best = v;   // first maximum, as torch.argmax
        out.push_back(best);
        if (!ignore_eos && std::find(stops.begin(), stops.end(), best) != stops.end()) break;
        if ((int)out.size() == n_new) break;
        TextGenerator::DraftedStep step = gen.append_drafted(best, n_new - (int)out.size());
        out.insert(out.end(), step.fed.begin() + 1, step.fed.end());
        offered += step.offered;
        accepted += step.accepted;
        ++passes;
        logits = step.logits;
    }
    auto t2 = clock::now();
    if (logits_out) std::fclose(logits_out);
    if (gen.spec_depth() > 0)
        std::fprintf(stderr, "speculation: %d passes, %d drafts offered, %d accepted (%.2f tokens per pass)\n", passes,
                     offered, accepted, passes ? (double)(passes + accepted) / passes : 0.0);

    std::string line;
    for (size_t k = 0; k < out.size(); ++k) line += (k ? "," : "") + std::to_string(out[k]);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    const double pp_s = std::chrono::duration<double>(t1 - t0).count();
    const double tg_s = std::chrono::duration<double>(t2 - t1).count();
    const CpuBackend* cpu = dynamic_cast<const CpuBackend*>(be.get());
    if (cpu) cpu->save_routing_profile();
    std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tok/s); decode: %zu tokens in %.3f s (%.1f tok/s); %s%s\n",
                 prompt.size(), pp_s, prompt.size() / std::max(pp_s, 1e-9), out.size(), tg_s,
                 out.size() > 1 ? (out.size() - 1) / std::max(tg_s, 1e-9) : 0.0, be->name(),
                 cpu ? (", " + std::to_string(cpu->n_threads()) + " threads").c_str() : "");
    if (mem1.peak >= 0)   // what a prompt chunk needs beyond the session (bench and tests/gpu/prefill_chunks.sh)
        std::fprintf(stderr, "memory: the prompt's activations and scratch peaked %.1f MiB above the %.1f MiB held "
                     "before it (chunks of %d tokens); %.1f MiB reserved for them after it\n",
                     (mem1.peak - mem0.live) / 1048576.0, mem0.live / 1048576.0, gen.chunk_tokens(),
                     mem1.reserved / 1048576.0);
    if (const PleReader* ple = model.ple_reader()) {
        const PleReader::Stats st = ple->stats();
        std::fprintf(stderr, "PLE table: %lld passes asked %lld rows, %lld distinct rows found in the row cache "
                     "(%zu rows), %lld read %s with %d I/O threads; %lld passes found every row cached, %lld were "
                     "begun during the pass before; the passes waited %.1f ms for rows\n", (long long)st.batches,
                     (long long)st.rows, (long long)st.cached, ple->cache_rows(), (long long)st.reads,
                     ple->unbuffered() ? "unbuffered" : "through the page cache", ple->io_threads(),
                     (long long)st.batches_cached, (long long)model.ple_reads_ahead(), st.wait_s * 1e3);
    }
    const Backend::ExpertCacheCounts c2 = be->expert_cache_counts();
    if (c2.lookups > c1.lookups)   // the hybrid path's decode share (prompt excluded)
        std::fprintf(stderr, "decode split: hits %lld of %lld; CPU %.1f ms for %lld pairs, %.1f MB of experts read "
                     "(%.1f GB/s); GPU waited %.1f ms for the CPU\n", (long long)(c2.hits - c1.hits),
                     (long long)(c2.lookups - c1.lookups), c2.cpu_ms - c1.cpu_ms, (long long)(c2.cpu_pairs - c1.cpu_pairs),
                     (c2.cpu_bytes - c1.cpu_bytes) / 1e6,
                     c2.cpu_ms > c1.cpu_ms ? (c2.cpu_bytes - c1.cpu_bytes) / (c2.cpu_ms - c1.cpu_ms) / 1e6 : 0.0,
                     c2.gpu_wait_ms - c1.gpu_wait_ms);
    return 0;
}

}  // namespace strata
