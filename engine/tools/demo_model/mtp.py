# The demo model's MTP (next-next-token) head, with the HF weight names engine/tools/convert.py expects
# (mtp.fc_embedding, mtp.fc_hidden, mtp.pre_fc_norm_*, mtp.layers.0.*, mtp.hyper_connection_mixer.*), and a hook
# that captures the trunk's final wide residual (the input of model.hyper_connection_mixer).
import copy

import torch
from torch import nn
from transformers.models.qwen4_exp import modeling_qwen4_exp as qwen4


class DenseIndexer(qwen4.Qwen4ExpTextQSAIndexer):
    """Keeps the indexer weights (so the layer has the trunk's tensor names) but selects every visible key:
    the draft layer attends densely (GGUF compress ratio 0)."""

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values):
        visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        return visible.clone()


class MtpHead(nn.Module):
    """Draft for token t+2 from the trunk's wide residual X_t (n*H) and the embedding of token t+1.
    Per stream s: h0_s = fc_embedding(enorm(e)) + fc_hidden(hnorm(X)_s); one attention-type decoder layer on the
    wide state; the head's own mixer; the trunk's lm_head. Positions are those of X_t."""

    def __init__(self, config):
        super().__init__()
        hidden, streams = config.hidden_size, config.hc_count
        self.hidden_size, self.hc_count = hidden, streams
        self.fc_embedding = nn.Linear(hidden, hidden, bias=False)
        self.fc_hidden = nn.Linear(hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = qwen4.Qwen4ExpTextRMSNorm(hidden, eps=config.rms_norm_eps)
        self.pre_fc_norm_hidden = qwen4.Qwen4ExpTextRMSNorm(hidden * streams, group_size=hidden, eps=config.rms_norm_eps)
        layer_config = copy.deepcopy(config)
        layer_config.num_hidden_layers, layer_config.layer_types, layer_config.ple_layer_ids = 1, ["indexed_attention"], []
        layer_config._attn_implementation = "sdpa"  # the mask below is boolean
        layer = qwen4.Qwen4ExpTextDecoderLayer(layer_config, 0)
        dense = DenseIndexer(layer_config, 0)
        dense.load_state_dict(layer.self_attn.indexer.state_dict())
        layer.self_attn.indexer = dense
        self.layers = nn.ModuleList([layer])
        self.hyper_connection_mixer = qwen4.Qwen4ExpTextGatedResidual(config, use_combine=False)
        self.rotary_emb = qwen4.Qwen4ExpTextRotaryEmbedding(config)

    def forward(self, wide_hidden, next_embeddings, position_ids=None, attention_mask=None):
        """wide_hidden [B, T, n*H] (trunk X_t or the head's own previous wide output), next_embeddings [B, T, H]
        (embed(token t+1)), position_ids [B, T] (default 0..T-1), attention_mask [B, 1, T, T] bool (default
        causal). Returns (draft hidden [B, T, H] for lm_head, wide output [B, T, n*H])."""
        batch, length, _ = wide_hidden.shape
        e = self.fc_embedding(self.pre_fc_norm_embedding(next_embeddings))
        h = self.fc_hidden(self.pre_fc_norm_hidden(wide_hidden).unflatten(-1, (self.hc_count, self.hidden_size)))
        x = (h + e.unsqueeze(-2)).flatten(-2)
        if position_ids is None:
            position_ids = torch.arange(length, device=x.device)[None].expand(batch, -1)
        cos, sin = self.rotary_emb(x, position_ids[None].expand(3, -1, -1))
        if attention_mask is None:
            causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
            attention_mask = causal[None, None].expand(batch, 1, -1, -1)
        wide = self.layers[0](x, position_embeddings=(cos, sin), attention_mask=attention_mask)
        return self.hyper_connection_mixer(wide), wide


class WideResidualCapture:
    """Forward pre-hook on model.model.hyper_connection_mixer: keeps the trunk's final wide residual."""

    def __init__(self, model):
        self.value = None
        self.handle = model.model.hyper_connection_mixer.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.value = args[0]

    def remove(self):
        self.handle.remove()


def init_mtp_weights(head: MtpHead, std: float):
    for name, param in head.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name or name.endswith("hc_norm.weight"):
            nn.init.zeros_(param)  # offset RMSNorms: (1 + w)
        elif name.endswith("A_log") or name.endswith("dt_bias"):
            continue
        else:
            nn.init.normal_(param, std=std)
