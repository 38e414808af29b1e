// strata-vision: the vision helper. Loads the vision GGUF, prints `READY <n_embd>`, then serves one request per
// stdin line (protocol.md §9, vision/README.md):
//   ENC <image.ppm> <out.bin>  ->  OK <n_tokens> <nx> <ny> <ms>   or   ERR <message>
//   QUIT (or end of input)     ->  exits
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "common/error.h"
#include "common/platform.h"
#include "gemm.h"
#include "ppm.h"
#include "quant/quant.h"
#include "vision_model.h"

using namespace strata;
using namespace strata::vision;

namespace {

const char* kUsage =
    "usage: strata-vision --model VISION.gguf [--threads N] [--info]\n"
    "  --info: print the model's key=value facts (n_embd, factor, min/max pixels, ...) and exit.\n"
    "  Serves the line protocol of protocol.md (vision helper) on stdin/stdout:\n"
    "  READY <n_embd>; ENC <image.ppm> <out.bin> -> OK <n_tokens> <nx> <ny> <ms> | ERR <message>; QUIT.\n";

void reply(const std::string& line) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
}

// The SVE1 file: magic, int32 n_tokens, nx, ny, n_embd (little-endian), then n_tokens rows of n_embd float32.
void write_embeddings(const std::string& path, const Encoding& e) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) fail("cannot write ", path);
    const int32_t head[4] = {(int32_t)(e.nx * e.ny), (int32_t)e.nx, (int32_t)e.ny, (int32_t)e.n_embd};
    f.write("SVE1", 4);
    f.write((const char*)head, sizeof(head));   // x86 / little-endian hosts only (as the engine)
    f.write((const char*)e.rows.data(), (std::streamsize)(e.rows.size() * sizeof(float)));
    f.close();
    if (!f) fail("cannot write ", path, " (disk full?)");
}

// Fields separated by spaces; a field may be double-quoted to hold spaces ("C:\\Users\\A B\\x.ppm"; no escapes
// inside, a path never contains '"'). False (with the reason) for an unterminated quote.
bool split_fields(const std::string& line, std::vector<std::string>& out, std::string& bad) {
    size_t i = 0;
    while (i < line.size()) {
        if (line[i] == ' ' || line[i] == '\t') {
            ++i;
            continue;
        }
        if (line[i] == '"') {
            const size_t close = line.find('"', i + 1);
            if (close == std::string::npos) {
                bad = "unterminated quote in the request line";
                return false;
            }
            out.push_back(line.substr(i + 1, close - i - 1));
            i = close + 1;
        } else {
            size_t j = i;
            while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
            out.push_back(line.substr(i, j - i));
            i = j;
        }
    }
    return true;
}

std::string one_line(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    platform::set_binary_stdio();
    std::string model_path;
    int threads = 0;
    bool info = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if ((a == "--model" || a == "-m") && i + 1 < argc) {
            model_path = argv[++i];
        } else if (a == "--threads" && i + 1 < argc) {
            char* end = nullptr;
            long v = std::strtol(argv[++i], &end, 10);
            if (!end || *end || v < 0 || v > 1024) {
                std::fprintf(stderr, "strata-vision: bad --threads '%s' (expected 0..1024, 0 = auto)\n", argv[i]);
                return 2;
            }
            threads = (int)v;
        } else if (a == "--info") {
            info = true;
        } else if (a == "--help" || a == "-h") {
            std::fputs(kUsage, stdout);
            return 0;
        } else {
            std::fprintf(stderr, "strata-vision: unknown argument '%s'\n%s", a.c_str(), kUsage);
            return 2;
        }
    }
    if (model_path.empty()) {
        std::fputs(kUsage, stderr);
        return 2;
    }

    std::unique_ptr<VisionModel> model;
    try {
        // STRATA_ISA=scalar|avx2|avx512 limits the kernels, as for the engine (tests run every path).
        if (const char* isa = std::getenv("STRATA_ISA")) {
            const std::string v = isa;
            if (v == "scalar") set_active_isa(Isa::scalar);
            else if (v == "avx2") set_active_isa(Isa::avx2);
            else if (v == "avx512") set_active_isa(Isa::avx512);
            else fail("STRATA_ISA must be scalar, avx2 or avx512, got '", v, "'");
        }
        model = VisionModel::load(model_path, threads);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "strata-vision: error: %s\n", e.what());
        reply("READY 0");
        return 1;
    }
    const VisionHparams& hp = model->hparams();
    if (info) {   // what the gateway needs to size pictures (smart_resize) and to check the rows
        std::printf("n_embd=%d\npatch_size=%d\nspatial_merge_size=%d\nfactor=%d\nmin_pixels=%llu\nmax_pixels=%llu\n"
                    "image_mean=%.9g,%.9g,%.9g\nimage_std=%.9g,%.9g,%.9g\ndepth=%d\nhidden_size=%d\n",
                    hp.out_hidden, hp.patch, hp.merge, hp.factor(), (unsigned long long)hp.min_pixels,
                    (unsigned long long)hp.max_pixels, hp.mean[0], hp.mean[1], hp.mean[2], hp.std[0], hp.std[1],
                    hp.std[2], hp.depth, hp.hidden);
        return 0;
    }
    std::fprintf(stderr, "strata-vision: %s: depth %d, width %d, %d heads, patch %d, merge %d, out %d; %s kernels\n",
                 model_path.c_str(), hp.depth, hp.hidden, hp.heads, hp.patch, hp.merge, hp.out_hidden, gemm().name);
    reply("READY " + std::to_string(hp.out_hidden));

    std::string line;
    while (std::getline(std::cin, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        std::vector<std::string> words;
        std::string bad;
        if (!split_fields(line, words, bad)) {
            reply("ERR " + bad);
            continue;
        }
        if (words.empty()) continue;   // blank lines are ignored (protocol.md §1)
        if (words[0] == "QUIT") break;
        if (words[0] != "ENC") {
            reply("ERR unknown command '" + one_line(words[0]) + "' (expected ENC or QUIT)");
            continue;
        }
        if (words.size() != 3) {
            reply("ERR ENC needs <image path> <output path> (double-quote a path that has spaces)");
            continue;
        }
        try {
            const auto t0 = std::chrono::steady_clock::now();
            RgbImage img = read_ppm(words[1]);
            model->check_size(img.width, img.height);
            Encoding e = model->encode(img);
            write_embeddings(words[2], e);
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            char buf[128];
            std::snprintf(buf, sizeof(buf), "OK %d %d %d %.1f", e.nx * e.ny, e.nx, e.ny, ms);
            reply(buf);
        } catch (const std::bad_alloc&) {
            reply("ERR out of memory encoding " + one_line(words[1]));
        } catch (const std::exception& e) {
            reply("ERR " + one_line(e.what()));
        }
    }
    return 0;
}
