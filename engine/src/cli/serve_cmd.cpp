// `strata --serve`: load the model, then hand stdin/stdout to the serve loop (protocol.md).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "common/error.h"

#include "backend/cpu/cpu_backend.h"
#include "cli/options.h"
#include "common/log.h"
#include "generate/vocabulary.h"
#include "model/qwen4exp_generator.h"
#include "serve/serve_loop.h"

namespace strata {

int serve_command(int argc, char** argv) {
    std::vector<std::string> flags = {"--model", "--backend", "--threads", "--ctx", "--chunk", "--mtp", "--spec",
                                      "--draft-min-p", "--checkpoint-every", "--spec-lookup", "--kv", "--park-mib"};
    flags.insert(flags.end(), kGpuFlags.begin(), kGpuFlags.end());
    Options o(argc, argv, 1, flags, {"--serve", "--f32-activations", "--no-pin", "--vision"});
    std::unique_ptr<Backend> be;
    std::unique_ptr<Qwen4Exp> model_ptr;
    std::unique_ptr<Qwen4ExpGenerator> gen_ptr;
    try {
        be = make_backend(o);
        model_ptr = std::make_unique<Qwen4Exp>(o.required("--model"), *be);
        gen_ptr = std::make_unique<Qwen4ExpGenerator>(*model_ptr, (int)o.integer("--ctx", 0, 0, 1 << 24),
                                                      prompt_chunk(o));
        gen_ptr->set_checkpoint_every((int)o.integer("--checkpoint-every", 16384, 0, 1 << 24));
        gen_ptr->set_park_budget((size_t)o.integer("--park-mib", (int64_t)kDefaultParkMib, 0, 1 << 24) << 20);
        if (o.has("--mtp")) gen_ptr->enable_speculation(o.str("--mtp"), (int)o.integer("--spec", 3, 1, 8));
        if (o.has("--mtp") && o.has("--spec-lookup")) fail("--spec-lookup is for a model without --mtp");
        gen_ptr->enable_lookup((int)o.integer("--spec-lookup", 0, 0, 8));
        gen_ptr->set_draft_min_p((float)o.real("--draft-min-p", kDefaultDraftMinP, 0.0, 1.0));
        if (o.has("--vision") && gen_ptr->image_token_id() < 0)
            fail("--vision: ", o.required("--model"), " names no <|image_pad|> token (neither in its vocabulary nor as "
                 "qwen4exp.ple.image_token_id)");
    } catch (const Error& e) {
        // protocol.md: a start that fails says READY 0 so the gateway knows at once; the message goes to stderr.
        std::cout << "READY 0 stop" << std::endl;
        throw;
    }
    const CpuBackend* cpu = dynamic_cast<const CpuBackend*>(be.get());
    Qwen4Exp& model = *model_ptr;
    Qwen4ExpGenerator& gen = *gen_ptr;
    log_info("serve", "model loaded: " + model.file().paths()[0] + ", context " + std::to_string(gen.context_length()) +
                          ", backend " + be->name() +
                          (cpu ? ", " + std::to_string(cpu->n_threads()) + " threads" : std::string()));
    ServeHooks hooks;
    hooks.vision = o.has("--vision");
    hooks.info = be->info();
    hooks.vocabulary = read_vocabulary(model.file());
    if (hooks.vision) hooks.info.push_back({"image_token_id", std::to_string(gen.image_token_id())});
    Backend* backend = be.get();
    hooks.expert_cache_counts = [backend] {
        const Backend::ExpertCacheCounts c = backend->expert_cache_counts();
        return std::make_pair(c.hits, c.lookups);
    };
    // With an expert cache, DONE also carries the hybrid path's time split; with a PLE table, the table's rows read,
    // found in the row cache and waited for; with speculation, the time its parts took (protocol.md §4).
    bool expert_cache = false;
    for (const auto& [key, value] : hooks.info) expert_cache = expert_cache || key == "expert_cache_slots";
    const PleReader* ple = model.ple_reader();
    const Qwen4ExpGenerator* spec = gen.speculates() ? &gen : nullptr;
    if (expert_cache || ple || spec)
        hooks.done_counters = [backend, expert_cache, ple, spec] {
            std::vector<std::pair<std::string, double>> v;
            if (expert_cache) {
                const Backend::ExpertCacheCounts c = backend->expert_cache_counts();
                v = {{"cpu_ms", c.cpu_ms}, {"gpu_wait_ms", c.gpu_wait_ms}, {"cpu_pairs", (double)c.cpu_pairs},
                     {"cpu_bytes", (double)c.cpu_bytes}, {"pcie_bytes", (double)c.pcie_bytes}};
            }
            if (ple) {
                const PleReader::Stats st = ple->stats();
                v.insert(v.end(), {{"ple_rows_read", (double)st.reads}, {"ple_rows_cached", (double)st.cached},
                                   {"ple_wait_ms", st.wait_s * 1e3}});
            }
            if (spec) {
                const Qwen4ExpGenerator::SpecTimes t = spec->spec_times();
                v.insert(v.end(), {{"draft_ms", t.draft_s * 1e3}, {"verify_ms", t.verify_s * 1e3},
                                   {"rollback_ms", t.rollback_s * 1e3}});
            }
            return v;
        };
    const int code = serve_main(gen, std::cin, std::cout, hooks);
    if (code != 0) {
        // The loop failed (an error from the backend, such as a CUDA fault that leaves the device unusable, or the
        // output closed): leave at once. Tearing down a faulted device can block for minutes (seen on the H200 after
        // an illegal address: ~200 s after the expert cache's summary); the gateway restarts the engine meanwhile.
        log_warn("serve", "leaving without releasing the model (the serve loop failed)");
        std::cout.flush();
        std::fflush(nullptr);
        std::_Exit(code);
    }
    return code;
}

}  // namespace strata
