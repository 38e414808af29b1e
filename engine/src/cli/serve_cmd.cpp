// `strata --serve`: load the model, then hand stdin/stdout to the serve loop (protocol.md).
#include <iostream>

#include "backend/cpu/cpu_backend.h"
#include "cli/options.h"
#include "common/log.h"
#include "model/qwen4exp_generator.h"
#include "serve/serve_loop.h"

namespace strata {

int serve_command(int argc, char** argv) {
    Options o(argc, argv, 1, {"--model", "--threads", "--ctx", "--chunk"}, {"--serve"});
    CpuBackend be((int)o.integer("--threads", 0, 0, 1024));
    Qwen4Exp model(o.required("--model"), be);
    Qwen4ExpGenerator gen(model, (int)o.integer("--ctx", 0, 0, 1 << 24), (int)o.integer("--chunk", 256, 1, 1 << 20));
    log_info("serve", "model loaded: " + model.file().paths()[0] + ", context " + std::to_string(gen.context_length()) +
                          ", " + std::to_string(be.n_threads()) + " threads");
    return serve_main(gen, std::cin, std::cout);
}

}  // namespace strata
