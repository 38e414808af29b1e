// strata: `generate`, `info` and `--serve`. Errors from bad input end the command with a message, never a crash.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/options.h"
#include "common/error.h"
#include "common/platform.h"
#if STRATA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

static const char* kUsage =
    "usage:\n"
    "  strata generate --model FILE (--prompt-ids 1,2,3 | --prompt-file F) [-n N] [--backend cpu|cuda]\n"
    "                  [--threads N] [--ctx N] [--chunk N] [--logits-out F] [--ignore-eos] [--f32-activations]\n"
    "                  [--mtp MTP.gguf [--spec N] [--draft-min-p P] [--mtp-logits-out F] | --spec-lookup N]\n"
    "                  [--images EMBEDDINGS.sve] [--kv f32|f16]\n"
    "  strata grammar-check GRAMMAR_FILE TEXT_FILE...   (docs/grammar.md: complete / prefix / rejected at byte N)\n"
    "  strata info FILE.gguf [--metadata] [--mtp MTP.gguf]   (also what --ctx and the MTP head take on the GPU)\n"
    "  strata --serve --model FILE [--backend cpu|cuda] [--threads N] [--ctx N] [--chunk N] [--mtp MTP.gguf [--spec N]]\n"
    "                 [--draft-min-p P]   (drafting stops below this head probability, default 0.5; 0 = full depth)\n"
    "                 --chunk N: prompt tokens a chunk (default 256 on the CPU, 2048 with --backend cuda)\n"
    "                 [--checkpoint-every N]   (a conversation checkpoint every N positions, default 16384)\n"
    "                 [--park-mib N]   (RAM for conversations another one displaced, resumed without re-reading\n"
    "                 them; default 4096, 0 = off)\n"
    "                 [--spec-lookup N]   (no MTP head: up to N drafts a pass from the text itself, default 0 = off)\n"
    "                 [--vision]   (GENI requests: image embeddings files from strata-vision, protocol.md)\n"
    "                 [--kv f32|f16]   (the attention layers' key/value caches; f16 halves the memory a context\n"
    "                 takes, default f32)\n"
    "GPU options (--backend cuda; needs a build with -DSTRATA_CUDA=ON):\n"
    "  --expert-cache auto|N-slots|N-GiB  keep only this many routed experts on the GPU; the CPU computes the rest\n"
    "  --vram-reserve-mib N  VRAM left free   --gpu-experts-max N  cap on slots   --cpu-workers N  CPU miss workers\n"
    "  --routing-profile F   fill the cache from recorded routing   --routing-profile-out F  record routing\n"
    "  --expert-adapt N      passes between cache moves (0 = frozen)\n"
    "  --gpu-miss-share auto|F  share (0..1) of each decode step's missed experts the GPU reads over PCIe itself\n"
    "                        (default auto: balanced against the CPU pass by pass)\n"
    "CPU threads are pinned one per physical core (default: all cores but one); --no-pin leaves them to the OS.\n"
    "Environment: STRATA_PROFILE=1 / STRATA_CUDA_PROFILE=1 print per-op times (CPU / GPU) at exit; STRATA_ISA=\n"
    "  scalar|avx2|avx512 limits the CPU kernels. Every switch (CUDA kernel A/B, expert pinning, the hybrid share):\n"
    "  docs/engine-environment.md.\n";

int main(int argc, char** argv) {
    strata::platform::set_binary_stdio();  // the protocol's lines end in "\n", also on Windows
    if (argc < 2) { std::fputs(kUsage, stderr); return 2; }
    const std::string cmd = argv[1];
#if STRATA_HAVE_CUDA
    strata::cuda_backend_factory = strata::make_cuda_backend;
#endif
    try {
        if (cmd == "generate") return strata::generate_command(argc, argv);
        if (cmd == "info") return strata::info_command(argc, argv);
        if (cmd == "grammar-check") return strata::grammar_check_command(argc, argv);
        for (int i = 1; i < argc; ++i)
            if (std::strcmp(argv[i], "--serve") == 0) return strata::serve_command(argc, argv);
        if (cmd == "-h" || cmd == "--help") { std::fputs(kUsage, stdout); return 0; }
        std::fprintf(stderr, "strata: unknown command '%s'\n%s", cmd.c_str(), kUsage);
        return 2;
    } catch (const strata::Error& e) {
        std::fprintf(stderr, "strata: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "strata: internal error: %s\n", e.what());
        return 3;
    }
}
