"""Text side of the gateway: GGUF metadata, tokenizer, detokenizer, chat template, output parsing."""
