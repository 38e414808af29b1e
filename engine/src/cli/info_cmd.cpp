// `strata info FILE`: the model description, every tensor's type, shape and bytes, and expert bytes per layer.
#include <cstdio>
#include <map>

#include "cli/options.h"
#include "common/error.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"
#include "model/mtp_head.h"
#include "model/session.h"

namespace strata {

int info_command(int argc, char** argv) {
    Options o(argc, argv, 2, {"--mtp"}, {"--metadata"});
    if (o.positional().size() != 1) fail("usage: strata info FILE.gguf [--metadata] [--mtp MTP.gguf]");
    auto f = GgufFile::open(o.positional()[0]);
    std::printf("files             ");
    for (size_t k = 0; k < f->paths().size(); ++k) std::printf("%s%s", k ? ", " : "", f->paths()[k].c_str());
    std::printf("\nGGUF version      %u, %zu metadata keys, %zu tensors\n", f->version(), f->metadata().size(),
                f->tensors().size());
    if (o.has("--metadata"))
        for (const auto& [key, value] : f->metadata()) std::printf("  %-48s %s\n", key.c_str(), value.summary().c_str());

    Hparams hp = Hparams::from_gguf(*f);
    if (const GgufTensor* e = f->find_tensor("token_embd.weight")) hp.n_vocab = (int)e->ne[1];
    std::printf("%s", hp.describe().c_str());
    // What --ctx (and --mtp) cost on the device besides the weights: the GPU backend keeps it free beside the expert
    // cache (the same functions as the CLI's reserve)
    for (KvType kv : {KvType::f32, KvType::f16, KvType::q8}) {
        std::printf("context state     (KV caches, indexer keys, recurrent state; --kv %s):", kv_type_name(kv));
        for (int n : {4096, 32768, 131072, 262144})
            std::printf(" %dK %.1f MiB;", n / 1024, Session::device_floats(hp, n, kv) * sizeof(float) / 1048576.0);
        std::printf("\n");
    }
    if (o.has("--mtp")) {
        std::printf("MTP head          (%s: block weights + KV; --kv f32):", o.str("--mtp").c_str());
        for (int n : {4096, 32768, 131072, 262144})
            std::printf(" %dK %.1f MiB;", n / 1024, MtpHead::device_bytes(o.str("--mtp"), n, KvType::f32) / 1048576.0);
        std::printf("\n");
    }

    std::printf("\n%-40s %-8s %-24s %14s\n", "tensor", "type", "shape", "bytes");
    std::map<std::string, uint64_t> bytes_by_type;
    uint64_t total = 0;
    for (const GgufTensor& t : f->tensors()) {
        std::printf("%-40s %-8s %-24s %14llu\n", t.name.c_str(), ggml_type_name(t.type), t.shape_string().c_str(),
                    (unsigned long long)t.n_bytes);
        bytes_by_type[ggml_type_name(t.type)] += t.n_bytes;
        total += t.n_bytes;
    }
    std::printf("\nbytes by type:");
    for (const auto& [name, b] : bytes_by_type) std::printf(" %s %.2f MiB;", name.c_str(), b / 1048576.0);
    std::printf(" total %.2f MiB\n", total / 1048576.0);

    std::printf("\nexpert bytes per layer (gate + up + down, all experts / one expert):\n");
    for (int il = 0; il < hp.n_layer + hp.n_nextn; ++il) {
        uint64_t sum = 0;
        for (const char* part : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
            const GgufTensor* t = f->find_tensor("blk." + std::to_string(il) + "." + part + ".weight");
            if (t) sum += t->n_bytes;
        }
        std::printf("  blk.%-3d %12llu  %10llu\n", il, (unsigned long long)sum,
                    (unsigned long long)(hp.n_expert ? sum / hp.n_expert : 0));
    }
    return 0;
}

}  // namespace strata
