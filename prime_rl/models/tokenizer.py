"""The tiny model's tokenizer: one token per byte, ChatML special tokens and a few whole-word tokens.

A byte-level BPE with no merges is a character-level tokenizer that round-trips any (NFC) text; on the
built-in string tasks it learns faster per step than a subword vocab. The whole-word tokens keep the
chat template short (`reverse: abcde` is 12 tokens as a ChatML prompt).
"""

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
WORD_TOKENS = ["user\n", "assistant\n", "system\n", "reverse: ", "sort: "]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def byte_alphabet() -> list[str]:
    """The 256 printable stand-ins byte-level BPE uses for bytes 0..255, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))  # bytes without a printable stand-in get the next free code points
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {char: byte for byte, char in enumerate(byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # NFC as in Qwen2Tokenizer, which transformers and vLLM load for a qwen2 model dir: same ids in memory and on disk.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    # Added (not merged) so they match greedily on raw text before the byte split.
    tok.add_tokens([AddedToken(t, normalized=False) for t in WORD_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        extra_special_tokens=["<|endoftext|>", "<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
