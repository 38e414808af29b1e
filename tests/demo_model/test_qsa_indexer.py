# The vectorised QSA indexer must give exactly transformers' selection (and so the same logits): plain causal
# batches, left-padded batches and cached decoding, on a tiny random qwen4_exp whose budget makes QSA really sparse.
# The indexer weights are shifted so that every block score is positive: relu would otherwise create exact ties,
# whose order torch.topk leaves unspecified (the vectorised indexer breaks them toward the earlier block).
import torch
from transformers import Qwen4ExpForCausalLM
from transformers.models.qwen4_exp import modeling_qwen4_exp as qwen4

from demo_model import qsa_indexer
from demo_model import model_config
from demo_model.model_config import TINY, make_config


def random_model():
    torch.manual_seed(0)
    config = make_config(TINY, vocab_size=97, eos_token_id=0, pad_token_id=0)
    config._attn_implementation = "sdpa"
    model = Qwen4ExpForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim == 1:
                param.normal_(0, 0.3)  # norms and gates too, so nothing is at its neutral value
        # Near-equal token embeddings and shared indexer rows in the channels RoPE leaves alone make every
        # query-block product about |W u|^2 > 0, so no score is clipped to an exact 0 by relu.
        embed = model.model.embed_tokens.weight
        embed.copy_(torch.randn(1, embed.shape[1]) + 0.05 * torch.randn_like(embed))
        for module in model.modules():
            if isinstance(module, qwen4.Qwen4ExpTextQSAIndexer):
                module.q_layernorm.weight.zero_()
                module.k_layernorm.weight.zero_()
                weight = module.index_qk_proj.weight.view(-1, module.index_head_dim, embed.shape[1])
                weight[:, :8, :] *= 0.1
                weight[:, 8:, :] = weight[:1, 8:, :] + 0.02 * torch.randn_like(weight[:, 8:, :])
    return model


def capture_masks(model, run):
    masks = []
    hooks = [m.register_forward_hook(lambda mod, args, out: masks.append(out.clone()))
             for m in model.modules() if isinstance(m, qwen4.Qwen4ExpTextQSAIndexer)]
    try:
        result = run()
    finally:
        for hook in hooks:
            hook.remove()
    return masks, result


def both_ways(model, run):
    qsa_indexer.unpatch_qsa_indexer()
    reference = capture_masks(model, run)
    qsa_indexer.patch_qsa_indexer()
    try:
        fast = capture_masks(model, run)
    finally:
        qsa_indexer.unpatch_qsa_indexer()
    return reference, fast


def test_causal_batch_same_masks_and_logits():
    model = random_model()
    ids = torch.randint(1, 97, (3, 45), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        (ref_masks, ref_out), (fast_masks, fast_out) = both_ways(model, lambda: model(ids).logits)
    assert len(ref_masks) == len(fast_masks) == len(model_config.ATTENTION_LAYERS)  # one mask per QSA layer
    for ref, fast in zip(ref_masks, fast_masks):
        assert torch.equal(ref, fast)
        assert ref.sum(-1).max() <= 8 + 3  # budget + ratio - 1: the selection is sparse
    assert torch.equal(ref_out, fast_out)


def test_left_padded_batch_same_masks():
    model = random_model()
    ids = torch.randint(1, 97, (2, 38), generator=torch.Generator().manual_seed(2))
    attention = torch.ones_like(ids)
    attention[1, :7] = 0
    with torch.no_grad():
        (ref_masks, ref_out), (fast_masks, fast_out) = both_ways(
            model, lambda: model(ids, attention_mask=attention).logits)
    for ref, fast in zip(ref_masks, fast_masks):
        assert torch.equal(ref, fast)
    assert torch.equal(ref_out[attention.bool()], fast_out[attention.bool()])


def test_cached_greedy_decoding_same_tokens():
    model = random_model()
    ids = torch.randint(1, 97, (1, 21), generator=torch.Generator().manual_seed(3))

    def generate():
        return model.generate(ids, max_new_tokens=14, do_sample=False, output_scores=True,
                              return_dict_in_generate=True)

    with torch.no_grad():
        (ref_masks, ref_out), (fast_masks, fast_out) = both_ways(model, generate)
    for ref, fast in zip(ref_masks, fast_masks):
        assert torch.equal(ref, fast)
    assert torch.equal(ref_out.sequences, fast_out.sequences)
    assert all(torch.equal(a, b) for a, b in zip(ref_out.scores, fast_out.scores))


def test_equal_scores_go_to_the_earlier_block():
    model = random_model()
    indexer = next(m for m in model.modules() if isinstance(m, qwen4.Qwen4ExpTextQSAIndexer))
    with torch.no_grad():
        indexer.index_qk_proj.weight.zero_()  # every score is 0: all blocks tie
    hidden = torch.randn(1, 30, 64)
    position_ids = torch.arange(30)[None, None].expand(3, 1, -1)
    cos_sin = model.model.rotary_emb(hidden, position_ids)
    causal = torch.ones(30, 30, dtype=torch.bool).tril()[None, None]
    with torch.no_grad():
        mask = qsa_indexer.fast_indexer_forward(indexer, hidden, cos_sin, causal, None)[0, 0]
    # query 29 sees 30 keys: 7 complete blocks, budget 2 blocks -> blocks 0 and 1, plus the tail 28..29
    assert mask[29].nonzero().flatten().tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 28, 29]
