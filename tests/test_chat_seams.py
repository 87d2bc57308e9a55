"""Tokenization at the seams: a teacher's answer becomes the student's tokens exactly as the student's chat
template renders the conversation (prompt/answer boundary, end of turn), for a byte-level BPE with leading-space
tokens (the tiny_qwen3 family's) and a SentencePiece-style `▁` tokenizer with a Llama-2-style template; an
answer cut off by the token limit is not taught as finished."""

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from prime_rl.config import compose_config
from prime_rl.models.chat import answer_ids, end_of_turn_id, final_answer, padding_id, prompt_ids, student_tokenizer
from prime_rl.models.tokenizer import build_bpe_tokenizer, build_tokenizer
from prime_rl.prepare.tiny import conversations
from prime_rl.tasks import load_task
from prime_rl.tasks.task import Example
from prime_rl.trainer.data import collate
from prime_rl.trainer.supervised import supervised_samples

ANSWERS = ["pqibny", "the answer is here", " leading space", "two  spaces\nand a line"]
PROMPT = "reverse: ynbiqp"


@pytest.fixture(scope="module")
def bpe():
    return build_bpe_tokenizer(conversations(load_task(compose_config().task)), 400)


def sentencepiece_style() -> PreTrainedTokenizerFast:
    """A `▁` (Metaspace) BPE with [INST] turns and </s> ending the assistant's, as Llama 2 and Mistral."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    specials = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=specials, show_progress=False)
    tok.train_from_iterator([PROMPT, *ANSWERS] * 20, trainer)
    template = (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
        "{% else %} {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        extra_special_tokens=["[INST]", "[/INST]"],
        chat_template=template,
    )


def rendered(tok, prompt: str, answer: str) -> list[int]:
    chat = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    return list(tok.apply_chat_template(chat, return_dict=False))


@pytest.mark.parametrize("kind", ["bpe", "sentencepiece", "char"])
def test_prompt_and_answer_are_the_templates_own_tokens(kind, bpe):
    tok = {"bpe": bpe, "sentencepiece": sentencepiece_style(), "char": build_tokenizer()}[kind]
    eot = end_of_turn_id(tok)
    for answer in ANSWERS:
        ids = prompt_ids(tok, PROMPT) + answer_ids(tok, PROMPT, answer)
        full = rendered(tok, PROMPT, answer)
        assert full[: len(ids)] == ids and ids[-1] == eot  # the boundary and the end of the turn, as rendered
        assert answer_ids(tok, PROMPT, answer, finished=False) == answer_ids(tok, PROMPT, answer)[:-1]


def test_the_bpe_family_has_real_subword_seams(bpe):
    assert any(len(t) > 1 for t in bpe.convert_ids_to_tokens(answer_ids(bpe, PROMPT, "the answer is here")))
    assert any(t.startswith("Ġ") for t in bpe.convert_ids_to_tokens(prompt_ids(bpe, PROMPT)))  # leading-space tokens
    assert "system" in bpe.decode(prompt_ids(bpe, PROMPT))  # the default system turn


def test_a_sentencepiece_answer_is_tokenized_in_context_not_alone():
    """Alone, ' leading space' would start with one `▁` fewer than after the template's own space."""
    tok = sentencepiece_style()
    alone = tok.encode(" leading space", add_special_tokens=False)
    assert answer_ids(tok, PROMPT, " leading space", finished=False) != alone


def test_the_end_of_turn_comes_from_the_template_not_the_eos(bpe):
    """A Qwen base model's eos is <|endoftext|>, while its template ends an assistant turn with <|im_end|>."""
    base = PreTrainedTokenizerFast(
        tokenizer_object=bpe.backend_tokenizer, eos_token="<|endoftext|>", chat_template=bpe.chat_template
    )
    assert base.eos_token_id != bpe.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn_id(base) == bpe.convert_tokens_to_ids("<|im_end|>")
    assert answer_ids(base, PROMPT, "abc")[-1] == bpe.convert_tokens_to_ids("<|im_end|>")


def test_a_tokenizer_without_a_pad_token_still_batches():
    # Mistral's and Llama 3's tokenizers define no pad token: batches pad with any id, masked out
    tok = sentencepiece_style()
    assert tok.pad_token_id is None
    batch = collate(supervised_samples(tok, [Example(PROMPT, answer) for answer in ANSWERS]), pad_id=padding_id(tok))
    padded = batch.attention_mask == 0
    assert padded.any() and (batch.loss_mask[padded] == 0).all()


# Qwen3's way, cut down: an assistant turn in the conversation opens with a (here empty) reasoning block, and
# `enable_thinking=false` puts that empty block in the generation prompt instead
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}<think>\n\n</think>\n\n{% endif %}{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def test_chat_template_args_reach_every_render_and_verifiers_skip_the_reasoning(bpe, tmp_path):
    bpe.save_pretrained(tmp_path)
    tok = PreTrainedTokenizerFast.from_pretrained(tmp_path)  # a copy: the module's tokenizer stays as it is
    tok.chat_template = THINKING_TEMPLATE
    tok.save_pretrained(tmp_path)
    thinking = student_tokenizer(compose_config([f"model.path={tmp_path}"]))
    quiet = student_tokenizer(
        compose_config([f"model.path={tmp_path}", "+model.chat_template_args.enable_thinking=false"])
    )
    answer = "pqibny"
    # thinking on: the student learns to open with the empty block, and the verifier looks past it
    taught = thinking.decode(answer_ids(thinking, PROMPT, answer), skip_special_tokens=True)
    assert taught.startswith("<think>") and final_answer(taught) == answer
    # thinking off: the block is part of the prompt, the answer is the answer alone
    assert quiet.decode(prompt_ids(quiet, PROMPT)).endswith("<think>\n\n</think>\n\n")
    assert quiet.decode(answer_ids(quiet, PROMPT, answer)) == answer + "<|im_end|>"


def test_final_answer_drops_a_leading_reasoning_block_only():
    assert final_answer("<think>\nlet me see\n</think>\n\n42") == "42"
    assert final_answer("<think>\ncut off by the token lim") == ""  # nothing answered yet
    assert final_answer("42 <think>x</think>") == "42 <think>x</think>"
