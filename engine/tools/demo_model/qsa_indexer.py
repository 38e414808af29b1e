# Vectorised QSA indexer for transformers' qwen4_exp: the same selection mask as Qwen4ExpTextQSAIndexer.forward,
# computed for all queries at once (block keys per batch row, block scores for every query, top-k over blocks,
# a block-to-token expansion) instead of a Python loop over queries. Patch it in with patch_qsa_indexer().
# One deliberate difference: among blocks with equal scores the earlier block wins (transformers' torch.topk
# leaves that order unspecified); engines must use the same rule to agree with this model.
import math

import torch
from transformers.models.qwen4_exp import modeling_qwen4_exp as qwen4

_ORIGINAL_FORWARD = qwen4.Qwen4ExpTextQSAIndexer.forward


def _visible_ranges(visible: torch.Tensor):
    """visible [B, T, KV] bool -> (start [B], count [B, T]) if every query sees one contiguous key range that
    starts at the same key for all queries of a row (causal masks, with or without left padding); else None."""
    kv_length = visible.shape[-1]
    count = visible.sum(-1)
    key_index = torch.arange(kv_length, device=visible.device)
    first = torch.where(visible, key_index, kv_length).amin(-1)
    last = torch.where(visible, key_index, -1).amax(-1)
    has_keys = count > 0
    if not bool(((last - first + 1 == count) | ~has_keys).all()):
        return None
    start = torch.where(has_keys, first, kv_length).amin(-1)  # [B]
    if not bool(((first == start[:, None]) | ~has_keys).all()):
        return None
    return start.clamp(max=kv_length - 1), count


def fast_indexer_forward(self, hidden_states, position_embeddings, attention_mask, past_key_values):
    batch_size, seq_length, _ = hidden_states.shape
    ratio, head_dim = self.compress_ratio, self.index_head_dim
    full_cos, full_sin = position_embeddings
    current_cos, current_sin = full_cos[:, -seq_length:, :], full_sin[:, -seq_length:, :]

    qk = self.index_qk_proj(hidden_states)
    q, token_k = torch.split(qk, [self.index_n_heads * head_dim, self.index_kv_heads * head_dim], dim=-1)
    q = q.reshape(batch_size, seq_length, -1, head_dim)
    raw_keys = token_k.reshape(batch_size, seq_length, -1, head_dim).squeeze(2)
    visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    visible = visible[:, 0]  # [B, T, KV]
    ranges = _visible_ranges(visible)
    if ranges is None:  # an unusual mask (not one contiguous causal range per row): use transformers' loop
        return _ORIGINAL_FORWARD(self, hidden_states, position_embeddings, attention_mask, past_key_values)
    start, count = ranges

    q = self.q_layernorm(q)
    q = qwen4.apply_rotary_pos_emb(q, cos=current_cos, sin=current_sin, unsqueeze_dim=2)
    if past_key_values is not None:
        raw_keys = past_key_values.update_indexer(raw_keys, self.layer_idx)
    kv_length = raw_keys.shape[1]
    device = hidden_states.device

    # Block keys per row: block k holds keys start + k*ratio ... start + k*ratio + ratio-1.
    max_blocks = kv_length // ratio
    if max_blocks == 0:
        return visible.unsqueeze(1).clone()
    offsets = torch.arange(max_blocks * ratio, device=device)
    key_positions = (start[:, None] + offsets).clamp(max=kv_length - 1)  # [B, NB*ratio]
    key_groups = raw_keys.gather(1, key_positions[..., None].expand(-1, -1, head_dim))
    key_groups = key_groups.view(batch_size, max_blocks, ratio, head_dim)
    pooled = key_groups.float().mean(dim=2).to(raw_keys.dtype)
    pooled = self.k_layernorm(pooled)
    block_starts = key_positions[:, ::ratio]  # [B, NB]
    rot = full_cos.shape[-1]
    cos = full_cos.gather(1, block_starts[..., None].expand(-1, -1, rot))
    sin = full_sin.gather(1, block_starts[..., None].expand(-1, -1, rot))
    block_keys = qwen4.apply_rotary_pos_emb(pooled.unsqueeze(2), cos=cos, sin=sin, unsqueeze_dim=2).squeeze(2)

    # Scores [B, T, NB]: sum over indexer heads of relu(q_h . k_b), over sqrt(head_dim).
    scores = torch.matmul(q.float(), block_keys.float().transpose(-1, -2)[:, None])  # [B, T, heads, NB]
    scores = torch.relu(scores).sum(dim=2) / math.sqrt(head_dim)
    complete_blocks = count // ratio  # [B, T]
    block_index = torch.arange(max_blocks, device=device)
    block_valid = block_index[None, None, :] < complete_blocks[..., None]
    scores = scores.masked_fill(~block_valid, float("-inf"))
    # torch.topk leaves the order of equal scores unspecified (relu makes exact zeros common): a stable
    # descending sort makes the rule explicit, equal scores go to the earlier block.
    k = min(self.block_topk, max_blocks)
    top = torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]  # [B, T, k]
    chosen = torch.zeros_like(block_valid).scatter(-1, top, True) & block_valid

    # Expand to tokens: key j belongs to block (j - start) // ratio; the incomplete tail is always kept.
    key_index = torch.arange(kv_length, device=device)
    rel = key_index[None, :] - start[:, None]  # [B, KV]
    key_block = (rel // ratio).clamp(0, max_blocks - 1)
    in_chosen = chosen.gather(-1, key_block[:, None, :].expand(-1, seq_length, -1))
    in_tail = rel[:, None, :] >= (complete_blocks * ratio)[..., None]
    selected = (in_chosen | in_tail) & visible & (rel[:, None, :] >= 0)
    return selected.unsqueeze(1)


def patch_qsa_indexer():
    """Make every Qwen4ExpTextQSAIndexer use the vectorised forward."""
    qwen4.Qwen4ExpTextQSAIndexer.forward = fast_indexer_forward


def unpatch_qsa_indexer():
    qwen4.Qwen4ExpTextQSAIndexer.forward = _ORIGINAL_FORWARD
