#include "model/weights.h"

#include "common/error.h"

namespace strata {

namespace {

// Binds one tensor and checks its shape; shape entries of -1 accept any size.
class Binder {
public:
    Binder(GgufFile& f) : f_(f) {}

    Weight get(const std::string& name, std::vector<int64_t> shape, bool required = true) {
        Weight w;
        const GgufTensor* t = f_.find_tensor(name);
        if (!t) {
            if (required) fail(f_.paths()[0], ": missing required tensor ", name);
            return w;
        }
        // Trailing 1s are equivalent ({2560} == {2560, 1}).
        while (shape.size() > 1 && shape.back() == 1) shape.pop_back();
        int dims = t->n_dims;
        while (dims > 1 && t->ne[dims - 1] == 1) --dims;
        bool ok = dims == (int)shape.size();
        for (int d = 0; ok && d < dims; ++d) ok = shape[d] < 0 || shape[d] == t->ne[d];
        if (!ok) {
            std::string want = "{";
            for (size_t d = 0; d < shape.size(); ++d) want += (d ? ", " : "") + std::to_string(shape[d]);
            want += "}";
            fail(f_.paths()[t->shard], ": tensor ", name, " has shape ", t->shape_string(), ", expected ", want,
                 " from the hyperparameters");
        }
        w.tensor = t;
        w.type = t->type;
        for (int d = 0; d < 4; ++d) w.ne[d] = t->ne[d];
        w.row_bytes = ggml_row_bytes(t->type, t->ne[0]);
        w.data = f_.map_tensor(*t);
        return w;
    }

private:
    GgufFile& f_;
};

HyperWeights bind_hyper(Binder& b, const std::string& prefix, const Hparams& hp, bool with_inject) {
    const int64_t nH = hp.hc_dim(), r = hp.hc_low_rank;
    HyperWeights w;
    w.norm = b.get(prefix + "norm.weight", {nH});
    w.down = b.get(prefix + "down.weight", {nH, r});
    w.up = b.get(prefix + "up.weight", {r, nH});
    if (with_inject) w.inject = b.get(prefix + "inject.weight", {nH, hp.hc_count});
    return w;
}

void bind_attention(Binder& b, const std::string& p, const Hparams& hp, QsaWeights& w, bool indexer_required) {
    const int64_t H = hp.n_embd, hd = hp.head_dim;
    w.q = b.get(p + "attn_q.weight", {H, hp.n_head * 2 * hd});
    w.k = b.get(p + "attn_k.weight", {H, hp.n_head_kv * hd});
    w.v = b.get(p + "attn_v.weight", {H, hp.n_head_kv * hd});
    w.out = b.get(p + "attn_output.weight", {hp.n_head * hd, H});
    w.q_norm = b.get(p + "attn_q_norm.weight", {hd});
    w.k_norm = b.get(p + "attn_k_norm.weight", {hd});
    const int64_t di = hp.indexer_head_dim;
    w.idx_q = b.get(p + "indexer.q_proj.weight", {H, hp.indexer_n_head * di}, indexer_required);
    w.idx_k = b.get(p + "indexer.k_proj.weight", {H, di}, indexer_required);
    w.idx_q_norm = b.get(p + "indexer.q_norm.weight", {di}, indexer_required);
    w.idx_k_norm = b.get(p + "indexer.k_norm.weight", {di}, indexer_required);
}

void bind_moe(Binder& b, const std::string& p, const Hparams& hp, MoeWeights& w) {
    const int64_t H = hp.n_embd, E = hp.n_expert, I = hp.n_ff_exp, Is = hp.n_ff_shexp;
    w.router = b.get(p + "ffn_gate_inp.weight", {H, E});
    w.gate_exps = b.get(p + "ffn_gate_exps.weight", {H, I, E});
    w.up_exps = b.get(p + "ffn_up_exps.weight", {H, I, E});
    w.down_exps = b.get(p + "ffn_down_exps.weight", {I, H, E});
    w.shexp_gate_inp = b.get(p + "ffn_gate_inp_shexp.weight", {H});
    w.gate_shexp = b.get(p + "ffn_gate_shexp.weight", {H, Is});
    w.up_shexp = b.get(p + "ffn_up_shexp.weight", {H, Is});
    w.down_shexp = b.get(p + "ffn_down_shexp.weight", {Is, H});
}

}  // namespace

LayerWeights bind_layer(GgufFile& f, const Hparams& hp, int il) {
    Binder b(f);
    const int64_t H = hp.n_embd;
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights L;
    L.recurrent = hp.is_recurrent[il];
    L.hc_attn = bind_hyper(b, p + "hc_attn_", hp, true);
    L.hc_ffn = bind_hyper(b, p + "hc_ffn_", hp, true);
    bind_moe(b, p, hp, L.moe);
    if (L.recurrent) {
        const int64_t nv = hp.ssm_n_value_head, dk = hp.ssm_head_dim;
        L.gdn.qkv = b.get(p + "attn_qkv.weight", {H, hp.conv_dim()});
        L.gdn.gate = b.get(p + "attn_gate.weight", {H, hp.value_dim()});
        L.gdn.beta = b.get(p + "ssm_beta.weight", {H, nv});
        L.gdn.alpha = b.get(p + "ssm_alpha.weight", {H, nv});
        L.gdn.conv1d = b.get(p + "ssm_conv1d.weight", {hp.ssm_conv_kernel, hp.conv_dim()});
        L.gdn.dt_bias = b.get(p + "ssm_dt.bias", {nv});
        L.gdn.a = b.get(p + "ssm_a", {nv});
        L.gdn.norm = b.get(p + "ssm_norm.weight", {dk});
        L.gdn.out = b.get(p + "ssm_out.weight", {hp.value_dim(), H});
    } else {
        // The MTP block attends densely; its indexer tensors are optional (loaded but unused by llama.cpp).
        bind_attention(b, p, hp, L.qsa, il < hp.n_layer);
    }
    if (il == hp.ple_layer) {
        L.has_ple = true;
        const int64_t nH = hp.hc_dim();
        L.ple.key = b.get(p + "ple_key.weight", {hp.ple_dim(), nH});
        L.ple.value = b.get(p + "ple_value.weight", {hp.ple_dim(), H});
        L.ple.norm_key = b.get(p + "ple_norm_key.weight", {nH});
        L.ple.norm_query = b.get(p + "ple_norm_query.weight", {nH});
        L.ple.norm_conv = b.get(p + "ple_norm_conv.weight", {nH});
        L.ple.conv1d = b.get(p + "ple_conv1d.weight", {hp.ple_conv_kernel, nH});
        const GgufTensor& table = f.tensor("per_layer_token_embd.weight");
        if (table.n_dims != 2 || table.ne[0] != hp.ple_row_width)
            fail(f.paths()[table.shard], ": per_layer_token_embd.weight has shape ", table.shape_string(),
                 ", expected {", hp.ple_row_width, ", rows}");
        for (int g = 0; g < hp.ple_n_heads(); ++g)
            if (hp.ple_head_offsets[g] + hp.ple_head_sizes[g] > (uint64_t)table.ne[1])
                fail(f.paths()[0], ": PLE head ", g, " reaches row ", hp.ple_head_offsets[g] + hp.ple_head_sizes[g],
                     " but the table has ", table.ne[1], " rows");
        L.ple.table = &table;
    }
    return L;
}

NextnWeights bind_nextn(GgufFile& f, const Hparams& hp, int il) {
    Binder b(f);
    const int64_t H = hp.n_embd;
    const std::string p = "blk." + std::to_string(il) + ".nextn.";
    NextnWeights n;
    n.eh_proj = b.get(p + "eh_proj.weight", {2 * H, H});
    n.enorm = b.get(p + "enorm.weight", {H});
    n.hnorm = b.get(p + "hnorm.weight", {hp.hc_dim()});
    n.head = bind_hyper(b, p + "hc_head_", hp, false);
    return n;
}

ModelWeights ModelWeights::bind(GgufFile& f, Hparams& hp) {
    Binder b(f);
    ModelWeights m;
    const int64_t H = hp.n_embd;
    const GgufTensor& embd = f.tensor("token_embd.weight");
    if (embd.n_dims != 2 || embd.ne[0] != H)
        fail(f.paths()[0], ": token_embd.weight has shape ", embd.shape_string(), ", expected {", H, ", n_vocab}");
    hp.n_vocab = (int)embd.ne[1];
    for (int32_t id : hp.stop_ids)
        if (id >= hp.n_vocab) fail(f.paths()[0], ": stop token id ", id, " is outside the vocabulary of ", hp.n_vocab);
    m.token_embd = b.get("token_embd.weight", {H, hp.n_vocab});
    m.output = b.get("output.weight", {H, hp.n_vocab}, false);
    if (!m.output.present()) m.output = m.token_embd;
    m.output_hc = bind_hyper(b, "output_hc_", hp, false);
    for (int il = 0; il < hp.n_layer + hp.n_nextn; ++il) m.layers.push_back(bind_layer(f, hp, il));
    if (hp.n_nextn) {
        m.has_nextn = true;
        m.nextn = bind_nextn(f, hp, hp.n_layer);
    }
    return m;
}

}  // namespace strata
