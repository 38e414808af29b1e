#include "model/hparams.h"

#include <sstream>

#include "common/error.h"
#include "gguf/gguf_file.h"

namespace strata {

namespace {
const std::string A = "qwen4exp.";

int get_positive(const GgufFile& f, const std::string& key) {
    uint64_t v = f.get_uint(key);
    if (v == 0 || v > (1u << 30)) fail(f.paths()[0], ": key ", key, " must be a positive integer, got ", v);
    return (int)v;
}
}  // namespace

Hparams Hparams::from_gguf(const GgufFile& f) {
    const std::string& path = f.paths()[0];
    std::string arch = f.get_string("general.architecture");
    if (arch != "qwen4exp") fail(path, ": architecture is '", arch, "', this engine runs 'qwen4exp'");

    Hparams h;
    int n_block = get_positive(f, A + "block_count");
    h.n_nextn = (int)f.get_uint_or(A + "nextn_predict_layers", 0);
    if (h.n_nextn < 0 || h.n_nextn > 1 || h.n_nextn >= n_block)
        fail(path, ": nextn_predict_layers = ", h.n_nextn, " is not supported (0 or 1)");
    h.n_layer = n_block - h.n_nextn;
    h.n_embd = get_positive(f, A + "embedding_length");
    h.n_ctx_train = get_positive(f, A + "context_length");
    h.rms_eps = (float)f.get_float(A + "attention.layer_norm_rms_epsilon");

    h.n_head = get_positive(f, A + "attention.head_count");
    h.n_head_kv = get_positive(f, A + "attention.head_count_kv");
    h.head_dim = get_positive(f, A + "attention.key_length");
    int value_length = get_positive(f, A + "attention.value_length");
    if (value_length != h.head_dim)
        fail(path, ": attention.value_length ", value_length, " differs from key_length ", h.head_dim);
    if (h.n_head % h.n_head_kv != 0)
        fail(path, ": head_count ", h.n_head, " is not a multiple of head_count_kv ", h.n_head_kv);
    h.n_rot = get_positive(f, A + "rope.dimension_count");
    if (h.n_rot > h.head_dim || h.n_rot % 2) fail(path, ": rope.dimension_count ", h.n_rot, " is invalid for head dim ", h.head_dim);
    h.rope_theta = (float)f.get_float(A + "rope.freq_base");
    std::vector<int64_t> sections = f.get_int_array(A + "rope.dimension_sections");
    for (size_t k = 0; k < 4 && k < sections.size(); ++k) h.rope_sections[k] = (int)sections[k];

    h.n_expert = get_positive(f, A + "expert_count");
    h.n_expert_used = get_positive(f, A + "expert_used_count");
    if (h.n_expert_used > h.n_expert) fail(path, ": expert_used_count ", h.n_expert_used, " > expert_count ", h.n_expert);
    h.n_ff_exp = get_positive(f, A + "expert_feed_forward_length");
    h.n_ff_shexp = get_positive(f, A + "expert_shared_feed_forward_length");

    h.ssm_conv_kernel = get_positive(f, A + "ssm.conv_kernel");
    h.ssm_head_dim = get_positive(f, A + "ssm.state_size");
    h.ssm_n_key_head = get_positive(f, A + "ssm.group_count");
    h.ssm_n_value_head = get_positive(f, A + "ssm.time_step_rank");
    int inner = get_positive(f, A + "ssm.inner_size");
    if (inner != h.value_dim())
        fail(path, ": ssm.inner_size ", inner, " != time_step_rank x state_size = ", h.value_dim());
    if (h.ssm_n_value_head % h.ssm_n_key_head != 0)
        fail(path, ": ssm.time_step_rank ", h.ssm_n_value_head, " is not a multiple of ssm.group_count ", h.ssm_n_key_head);

    h.hc_count = get_positive(f, A + "hyper_connection.count");
    if (h.hc_count < 2) fail(path, ": hyper_connection.count must be > 1, got ", h.hc_count);
    h.hc_low_rank = get_positive(f, A + "hyper_connection.low_rank");

    h.indexer_n_head = get_positive(f, A + "attention.indexer.head_count");
    h.indexer_head_dim = get_positive(f, A + "attention.indexer.key_length");
    h.indexer_top_k = get_positive(f, A + "attention.indexer.top_k");
    if (h.n_rot > h.indexer_head_dim) fail(path, ": rope.dimension_count ", h.n_rot, " exceeds indexer key_length ", h.indexer_head_dim);

    int interval = (int)f.get_uint_or(A + "full_attention_interval", 4);
    if (interval <= 0) fail(path, ": full_attention_interval must be positive");
    h.is_recurrent.resize(n_block);
    if (f.has(A + "attention.recurrent_layers")) {
        const GgufValue* v = f.find(A + "attention.recurrent_layers");
        if (v->array_size() != (size_t)n_block) fail(path, ": attention.recurrent_layers has ", v->array_size(), " entries, expected ", n_block);
        for (int il = 0; il < n_block; ++il) h.is_recurrent[il] = v->arr_u[il] != 0;
    } else {
        for (int il = 0; il < n_block; ++il) h.is_recurrent[il] = il < h.n_layer && (il + 1) % interval != 0;
    }
    std::vector<int64_t> ratios = f.get_int_array(A + "attention.compress_ratios");
    if ((int)ratios.size() < h.n_layer) fail(path, ": attention.compress_ratios has ", ratios.size(), " entries, expected ", n_block);
    h.compress_ratios.assign(n_block, 0);
    for (int il = 0; il < n_block && il < (int)ratios.size(); ++il) {
        if (ratios[il] < 0) fail(path, ": compress ratio of block ", il, " is negative");
        h.compress_ratios[il] = (int)ratios[il];
        if (ratios[il] > 0 && h.indexer_top_k % ratios[il] != 0)
            fail(path, ": indexer.top_k ", h.indexer_top_k, " is not a multiple of compress ratio ", ratios[il]);
    }

    if (f.has(A + "ple.layers")) {
        std::vector<int64_t> layers = f.get_int_array(A + "ple.layers");
        if (layers.size() > 1) fail(path, ": ple.layers has ", layers.size(), " entries; one PLE layer is supported");
        if (layers.size() == 1) {
            h.ple_layer = (int)layers[0];
            if (h.ple_layer < 0 || h.ple_layer >= h.n_layer || !h.is_recurrent[h.ple_layer])
                fail(path, ": PLE layer ", h.ple_layer, " must be a Gated DeltaNet layer of the trunk");
            h.ple_ngram = get_positive(f, A + "ple.ngram_size");
            h.ple_heads_per_ngram = get_positive(f, A + "ple.heads_per_ngram");
            h.ple_conv_kernel = get_positive(f, A + "ple.conv_kernel");
            h.ple_row_width = get_positive(f, A + "embedding_length_per_layer_input");
            h.ple_eos_id = (uint32_t)f.get_uint(A + "ple.eos_token_id");
            h.ple_image_id = (uint32_t)f.get_uint_or(A + "ple.image_token_id", h.ple_eos_id);
            if (h.ple_ngram < 2 || h.ple_ngram > 8) fail(path, ": ple.ngram_size ", h.ple_ngram, " is out of range 2..8");
            if (h.ple_n_heads() > 256) fail(path, ": PLE head count ", h.ple_n_heads(), " is out of range");
            h.ple_multipliers = f.get_uint64_array(A + "ple.layer_multipliers");
            h.ple_head_offsets = f.get_uint64_array(A + "ple.head_offsets");
            h.ple_head_sizes = f.get_uint64_array(A + "ple.head_vocab_sizes");
            if ((int)h.ple_multipliers.size() < h.ple_ngram)
                fail(path, ": ple.layer_multipliers has ", h.ple_multipliers.size(), " entries, need ", h.ple_ngram);
            if ((int)h.ple_head_offsets.size() < h.ple_n_heads() || (int)h.ple_head_sizes.size() < h.ple_n_heads())
                fail(path, ": ple.head_offsets / head_vocab_sizes need ", h.ple_n_heads(), " entries");
            for (int g = 0; g < h.ple_n_heads(); ++g) {
                if (h.ple_head_sizes[g] == 0) fail(path, ": PLE head ", g, " has vocab size 0");
                if (h.ple_head_offsets[g] + h.ple_head_sizes[g] > (uint64_t)INT32_MAX)
                    fail(path, ": PLE head ", g, " offset + size exceeds INT32_MAX");
            }
        }
    }

    // Generation stops on the tokenizer's EOS and on <|endoftext|> / <|im_end|> when the vocabulary names them.
    auto add_stop = [&](int64_t id) {
        if (id < 0) return;
        for (int32_t s : h.stop_ids) if (s == id) return;
        h.stop_ids.push_back((int32_t)id);
    };
    if (f.has("tokenizer.ggml.eos_token_id")) add_stop((int64_t)f.get_uint("tokenizer.ggml.eos_token_id"));
    if (f.has("tokenizer.ggml.tokens")) {
        const GgufValue* toks = f.find("tokenizer.ggml.tokens");
        for (size_t id = 0; id < toks->arr_s.size(); ++id)
            if (toks->arr_s[id] == "<|im_end|>" || toks->arr_s[id] == "<|endoftext|>") add_stop((int64_t)id);
            else if (toks->arr_s[id] == "<|im_start|>") h.turn_start_id = (int32_t)id;
            else if (toks->arr_s[id] == "<|image_pad|>") h.image_token_id = (int32_t)id;
    }
    if (h.image_token_id < 0 && f.has(A + "ple.image_token_id"))
        h.image_token_id = (int32_t)f.get_uint(A + "ple.image_token_id");
    return h;
}

std::string Hparams::describe() const {
    std::ostringstream os;
    int n_attn = 0;
    for (int il = 0; il < n_layer; ++il) n_attn += !is_recurrent[il];
    os << "layers            " << n_layer << " (" << n_layer - n_attn << " Gated DeltaNet, " << n_attn
       << " QSA attention)" << (n_nextn ? " + 1 MTP block" : "") << "\n";
    os << "hidden            " << n_embd << " x " << hc_count << " hyper-connection streams (low rank " << hc_low_rank << ")\n";
    os << "vocabulary        " << n_vocab << "\n";
    os << "context (trained) " << n_ctx_train << "\n";
    os << "attention         " << n_head << " heads, " << n_head_kv << " KV heads, head dim " << head_dim << ", rotary "
       << n_rot << " dims, theta " << rope_theta << "\n";
    os << "QSA indexer       " << indexer_n_head << " heads x " << indexer_head_dim << ", budget " << indexer_top_k
       << " tokens\n";
    os << "Gated DeltaNet    " << ssm_n_key_head << " key heads, " << ssm_n_value_head << " value heads, head dim "
       << ssm_head_dim << ", conv kernel " << ssm_conv_kernel << "\n";
    os << "MoE               " << n_expert << " experts, top " << n_expert_used << ", expert FF " << n_ff_exp
       << ", shared FF " << n_ff_shexp << "\n";
    if (ple_layer >= 0)
        os << "PLE               layer " << ple_layer << ", n-gram " << ple_ngram << ", " << ple_n_heads() << " heads x "
           << ple_row_width << ", EOS " << ple_eos_id << "\n";
    else
        os << "PLE               none\n";
    os << "rms eps           " << rms_eps << "\n";
    os << "stop ids          ";
    for (size_t k = 0; k < stop_ids.size(); ++k) os << (k ? "," : "") << stop_ids[k];
    os << "\n";
    return os.str();
}

}  // namespace strata
