"""Token ids of prompts and completions under the student's chat template."""

from typing import List, Tuple


def prompt_ids(tokenizer, prompt: str) -> List[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def retokenize(tokenizer, prompt: str, completion: str) -> Tuple[List[int], List[int]]:
    """(prompt ids, completion ids) of a teacher's text: the completion is whatever the template adds after the prompt."""
    head = prompt_ids(tokenizer, prompt)
    full_text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}], tokenize=False
    )
    full = tokenizer(full_text, add_special_tokens=False)["input_ids"]
    if full[: len(head)] != head:
        raise ValueError("the chat template does not extend the prompt with the answer; cannot mask the prompt")
    return head, full[len(head):]
