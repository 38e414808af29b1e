"""transformers' qwen4_exp on the CPU as the oracle: greedy tokens and per-step logits of a tiny model."""
import numpy as np
import torch


def load_hf(hf_dir: str):
    from transformers import Qwen4ExpForCausalLM
    torch.manual_seed(0)
    model = Qwen4ExpForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model.eval()
    return model


@torch.no_grad()
def hf_greedy(model, prompt: list[int], n_new: int) -> tuple[list[int], np.ndarray]:
    """Prefill + one-token steps with the cache (use_cache=True); returns tokens and logits [n_new, V]."""
    ids = torch.tensor([prompt], dtype=torch.long)
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1]
    tokens, rows = [], []
    for _ in range(n_new):
        rows.append(logits.float().numpy().copy())
        nxt = int(torch.argmax(logits))
        tokens.append(nxt)
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1]
    return tokens, np.stack(rows)
