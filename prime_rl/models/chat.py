"""Token ids under the student's chat template: the one place prompts and answers become tokens.

rl and opd never come here for completions: they train on the token ids vLLM sampled. sft and the warm start
tokenize an answer's text as the template places it after the generation prompt, and end it with the token the
template closes an assistant turn with (which is also where sampling stops), unless the answer was cut off.
"""

import functools
import itertools
import re
from pathlib import Path
from typing import Any

from prime_rl.config.schema import Config
from prime_rl.models.recipe import student_dir
from prime_rl.models.tokenizer_class import load_tokenizer

SENTINEL = "\x00answer\x00"  # stands in for an answer while the template is rendered around it
# a reasoning block at the start of a text (Qwen3, DeepSeek-R1), maybe unclosed: cut off by the token limit
THINK_BLOCK = re.compile(r"^\s*<think>.*?(</think>\s*|$)", re.DOTALL)
PINNED_DATE = "26 Jul 2024"  # the date a template that would write today's gets (pinned_date)


def as_messages(prompt: str | list[dict]) -> list[dict]:
    """A prompt is a user message, or the messages before the answer (a system message, then the user's)."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def prompt_ids(tokenizer, prompt: str | list[dict], tools: list[dict] | None = None) -> list[int]:
    """The prompt's turns, ending with the assistant generation prompt; `tools`: JSON schemas the template lists."""
    chat = as_messages(prompt)
    return list(tokenizer.apply_chat_template(chat, tools=tools, add_generation_prompt=True, return_dict=False))


def answer_ids(
    tokenizer, prompt: str | list[dict], answer: str | dict, finished: bool = True, tools: list[dict] | None = None
) -> list[int]:
    """The assistant's answer tokenized where the template puts it, after `prompt`'s generation prompt (so a
    SentencePiece tokenizer does not add a word-start `▁` the conversation would not have), then the end-of-turn
    token: what a sampled completion looks like. `answer`: its text, or the assistant message (with the OpenAI
    `tool_calls` it makes, which the template writes in the model's own call format). An answer cut off by a
    token limit (`finished=False`) gets no end token, so it does not teach stopping mid-answer."""
    head = prompt_ids(tokenizer, prompt, tools)
    message = answer if isinstance(answer, dict) else {"role": "assistant", "content": answer}
    chat = as_messages(prompt) + [message]
    full = list(tokenizer.apply_chat_template(chat, tools=tools, return_dict=False))
    if full[: len(head)] != head:
        raise ValueError("the chat template renders the user turn differently once an answer follows it")
    eot = end_of_turn_id(tokenizer)
    ids = full[len(head) :]
    ids = ids[: ids.index(eot)]
    return ids + [eot] if finished else ids


def next_turn_ids(
    tokenizer, history: list[dict], new_messages: list[dict], sampled: list[int], tools: list[dict] | None = None
) -> list[int]:
    """The tokens between a sampled reply and the next one: the end of the assistant turn the model did not sample
    (all of it when max_tokens cut the reply off), then `new_messages` and the generation prompt. They are cut from
    one render of the conversation with the reply's text stood in for, after the stand-in: rendered alone, the new
    messages would get a template's default system turn, and re-rendering the reply could change its tokens (a
    sampled `s o r t :` renders as the word token `sort: `), so the sampled ids are never re-tokenized."""
    chat = as_messages(history) + [{"role": "assistant", "content": SENTINEL}, *new_messages]
    text = tokenizer.apply_chat_template(chat, tools=tools, add_generation_prompt=True, tokenize=False)
    ids = tokenizer.encode(text[text.index(SENTINEL) + len(SENTINEL) :], add_special_tokens=False)
    if sampled and ids and sampled[-1] == ids[0]:  # the model ended its turn itself
        return ids[1:]
    return ids


def transcript_ids(tokenizer, messages: list[dict], tools: list[dict] | None = None):
    """A whole multi-turn conversation as an episode would hold it: (the prompt up to the first assistant turn,
    everything after it, a mask that is true at the assistant's tokens), each reply tokenized where the template
    puts it (answer_ids) and closed by its end of turn, the turns between them bridged as in an episode
    (next_turn_ids)."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
        raise ValueError("a transcript needs an assistant turn to train on")
    history, ids, mask = list(messages[:first]), [], []
    for i in range(first, len(messages)):
        if messages[i]["role"] != "assistant":
            continue
        reply = answer_ids(tokenizer, history, messages[i], tools=tools)
        following = list(itertools.takewhile(lambda m: m["role"] != "assistant", messages[i + 1 :]))
        between = next_turn_ids(tokenizer, history, following, reply, tools) if following else []
        ids += reply + between
        mask += [True] * len(reply) + [False] * len(between)
        history += [messages[i], *following]
    return prompt_ids(tokenizer, messages[:first], tools), ids, mask


def renders_tool_calls(tokenizer) -> bool:
    """Whether the chat template writes the OpenAI `tool_calls` of an assistant message: the only way a chat
    endpoint's calls (a teacher's) reach the tokens a student trains on."""
    call = {"id": "call_0", "type": "function", "function": {"name": "probe_tool", "arguments": '{"probe_arg": 1}'}}
    chat = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    try:
        text = tokenizer.apply_chat_template(chat, tokenize=False)
    except Exception:  # a template that refuses the message (jinja's raise_exception) does not render it either
        return False
    return "probe_tool" in text and "probe_arg" in text


@functools.cache
def end_of_turn_id(tokenizer) -> int:
    """The first token the chat template puts after an assistant's answer (`<|im_end|>` for ChatML, `<|eot_id|>`
    for Llama 3, `<end_of_turn>` for Gemma): not always the tokenizer's eos (a Qwen base model's is
    `<|endoftext|>`)."""
    chat = [{"role": "user", "content": "?"}, {"role": "assistant", "content": SENTINEL}]
    text = tokenizer.apply_chat_template(chat, tokenize=False)
    after = text[text.index(SENTINEL) + len(SENTINEL) :]
    following = tokenizer.encode(after, add_special_tokens=False)
    if not following or following[0] not in tokenizer.added_tokens_decoder:
        raise ValueError(f"the chat template ends an assistant turn with {after[:20]!r}, not a special token")
    return following[0]


@functools.cache
def turn_end_ids(tokenizer) -> tuple[int, ...]:
    """The end-of-turn token as a tuple, or none for a template that ends a turn with plain text (only rl can
    train such a model: the eos alone stops it)."""
    try:
        return (end_of_turn_id(tokenizer),)
    except ValueError:
        return ()


def padding_id(tokenizer) -> int:
    """The id batches are padded with: any works, padding is masked out (Llama 3 and Mistral define no pad token)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def final_answer(text: str) -> str:
    """The text after a leading <think>…</think> block: what a verifier scores (nothing if the thinking was cut
    off). A thinking template (Qwen3's) opens every answer with one, empty when thinking is off."""
    return THINK_BLOCK.sub("", text, count=1)


def student_tokenizer(cfg: Config):
    """The student's tokenizer, its chat template rendered with `model.chat_template_args` everywhere (Qwen3's
    enable_thinking: false makes every prompt end with an empty <think></think> block)."""
    return chat_tokenizer(student_dir(cfg), cfg.model.chat_template_args)


def chat_tokenizer(source: str | Path, template_args: dict[str, Any]):
    """The tokenizer of a model dir (or Hub id), its chat template rendered with `template_args` (and a pinned
    date) everywhere."""
    tokenizer = load_tokenizer(source)
    args = pinned_date(tokenizer.chat_template) | template_args
    if args:
        # bound to the instance, so every render (prompt, answer, end of turn) sees the same variables
        tokenizer.apply_chat_template = functools.partial(tokenizer.apply_chat_template, **args)
    return tokenizer


def pinned_date(template: str | dict | None) -> dict[str, str]:
    """A template that writes today's date into every prompt (Llama 3.2/3.3: `strftime_now`, unless `date_string`
    is given) would change the prompts at midnight: mid-run, across a resume, between a cached teacher answer and
    its prompt. Pinned to one date (Llama 3.1's own default), unless model.chat_template_args sets date_string."""
    text = str(template or "")
    return {"date_string": PINNED_DATE} if "strftime_now" in text and "date_string" in text else {}
