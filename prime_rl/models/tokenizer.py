"""The built-in models' tokenizers, both byte-level BPE with ChatML special tokens, loadable as Qwen2Tokenizer.

- `char` (the default tiny model): no merges, one token per byte, plus a few whole-word tokens. It round-trips
  any (NFC) text, learns the built-in string tasks faster per step than a subword vocab, and keeps the chat
  template short (`reverse: abcde` is 12 tokens as a ChatML prompt).
- `bpe` (the realistic family): a byte-level BPE trained here on the task's text with Qwen2's pre-tokenizer
  (leading-space `Ġ` tokens, multi-character merges), and a Qwen-style chat template with a default system turn.
"""

import re
from collections.abc import Iterable

import jinja2
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
# task=lookup's call opens and closes with a tag: one token each, as in Qwen's vocabulary
WORD_TOKENS = ["user\n", "assistant\n", "system\n", "reverse: ", "sort: ", "<tool_call>", "</tool_call>"]
# The tools an episode's environment offers (JSON schemas), one line in a system turn: `tools: get(key)`. Calls are
# the reply's text, in the hermes format vLLM's `hermes` tool parser reads: <tool_call>{"name": …}</tool_call>.
TOOLS_TURN = (
    "{% if tools %}{{ '<|im_start|>system\\ntools:' }}{% for tool in tools %}"
    "{% set function = tool['function'] %}"
    "{{ ' ' + function['name'] + '(' + (function['parameters']['properties'] | list | join(', ')) + ')' }}"
    "{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}"
)
# A message's text, then the calls an assistant message carries as OpenAI `tool_calls` (a teacher's, from a chat
# endpoint) in the same hermes format, so they tokenize as a student writes them.
MESSAGE = (
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{% for call in message['tool_calls'] or [] %}{% set f = call['function'] %}"
    "{{ '<tool_call>{\"name\": ' + (f['name'] | tojson) + ', \"arguments\": ' }}"
    "{{ f['arguments'] if f['arguments'] is string else (f['arguments'] | tojson) }}{{ '}</tool_call>' }}"
    "{% endfor %}{{ '<|im_end|>' + '\\n' }}"
)
CHAT_TEMPLATE = (
    TOOLS_TURN
    + "{% for message in messages %}"
    + MESSAGE
    + "{% endfor %}"
    + ("{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
)


# Qwen2's pre-tokenization pattern (the one transformers' Qwen2Tokenizer applies when it loads a model dir).
QWEN_PRETOKENIZE = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
DEFAULT_SYSTEM = "You are a helpful assistant."
QWEN_CHAT_TEMPLATE = (
    TOOLS_TURN + "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}" + MESSAGE + "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
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
    return as_transformers(tok, pad="<|pad|>", chat_template=CHAT_TEMPLATE)


def build_bpe_tokenizer(conversations: Iterable[list[dict]], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE of `vocab_size` tokens (special tokens included) trained on `conversations` as the chat
    template renders them, so the template's own words (roles, the system turn) become tokens too."""
    template = jinja2.Environment().from_string(QWEN_CHAT_TEMPLATE)
    specials = re.compile("|".join(map(re.escape, SPECIAL_TOKENS)))
    # The special tokens are tokens already: merges are learnt on the text between them.
    texts = [part for c in conversations for part in specials.split(template.render(messages=c)) if part]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte stays encodable
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    # Qwen pads with <|endoftext|>
    return as_transformers(tok, pad="<|endoftext|>", chat_template=QWEN_CHAT_TEMPLATE)


def as_transformers(tok: Tokenizer, pad: str, chat_template: str) -> PreTrainedTokenizerFast:
    """The tokenizer as transformers and vLLM load it: ChatML's end of turn as eos, the other specials extra."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token=pad,
        extra_special_tokens=[t for t in SPECIAL_TOKENS if t not in ("<|im_end|>", pad)],
        chat_template=chat_template,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
