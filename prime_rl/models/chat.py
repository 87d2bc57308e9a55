"""Token ids under the student's chat template: the one place prompts and answers become tokens."""


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """The prompt as a single user turn, ending with the assistant generation prompt."""
    chat = [{"role": "user", "content": prompt}]
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False))


def answer_ids(tokenizer, answer: str) -> list[int]:
    """The assistant's answer and the end-of-turn token: what a sampled completion looks like."""
    return tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
