"""What a top-k distillation across vocabularies would have to work with (docs/cross_tokenizer.md, "Checks"): the
foreign teacher of bench/cross_tokenizer.py (the built-in teacher's recipe on a byte-level BPE of the task's text)
against the default student (one token per byte).

A top-k signal compares the teacher's next-token distribution with the student's over the same tokens. Across
vocabularies that needs a position where both predict the same text (a chunk of one token each side) and a teacher
token whose string the student's vocabulary also has (the rest would go to a tail bucket, as ULD-style matching or a
shared-string restriction do). For every eval example, the student's reply (the reference answer in the student's
tokens, and its end of turn) is aligned with the teacher's tokens of the same text (teacher/alignment.py); at each
one-to-one position the teacher's top k is read from a forward pass. Printed per k: the share of the student's
tokens at one-to-one positions, the teacher's top-k mass there, and the share of that mass on strings the student
also has; that share is what a top-k across these two vocabularies would compare, the rest is one tail bucket.

    .venv/bin/python bench/topk_vocab.py            # ~1 min on 2 cores (the foreign teacher cached, else its build)
"""

import argparse
import statistics

from common import compose, finish, print_table

NAME = "topk_vocab"
FOREIGN = ["experiment=opd", "model.tiny.tokenizer=bpe"]  # bench/cross_tokenizer.py's foreign teacher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", default="1,4,8,32", help="comma-separated top-k sizes")
    parser.add_argument("--examples", type=int, default=256, help="eval examples read")
    parser.add_argument("--smoke", action="store_true", help="record nothing")
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from prime_rl.models.chat import chat_tokenizer
    from prime_rl.prepare import prepare_student, prepare_teacher
    from prime_rl.tasks.registry import load_task
    from prime_rl.teacher.alignment import TextAlignment

    cfg = compose(FOREIGN)
    student_tok = chat_tokenizer(prepare_student(compose(["experiment=opd"])), {})
    teacher_dir = prepare_teacher(cfg)
    teacher_tok = chat_tokenizer(teacher_dir, {})
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32).eval()
    student_strings = set(student_tok.get_vocab())  # the tokens' strings, in the tokenizers' shared byte alphabet
    aligner, ks = TextAlignment(student_tok, teacher_tok), [int(k) for k in args.ks.split(",")]
    counts = {"student_tokens": 0, "one_to_one": 0}
    mass = {k: [] for k in ks}
    shared = {k: [] for k in ks}
    for ex in load_task(cfg.task).eval[: args.examples]:
        reply = student_tok.encode(ex.answer, add_special_tokens=False) + [student_tok.eos_token_id]
        found = aligner.teacher_pair(ex.messages, reply, truncated=False)
        if found is None:
            continue
        prompt, completion, chunks = found
        with torch.no_grad():
            logits = teacher(torch.tensor([prompt + completion])).logits[0]
        probs = torch.softmax(logits[len(prompt) - 1 : -1], dim=-1)  # row t predicts completion token t
        counts["student_tokens"] += sum(chunks.student)
        t = 0
        for s_n, t_n in zip(chunks.student, chunks.teacher):
            if s_n == t_n == 1:
                counts["one_to_one"] += 1
                for k in ks:
                    top = probs[t].topk(k)
                    strings = teacher_tok.convert_ids_to_tokens(top.indices.tolist())
                    kept = sum(p for p, s in zip(top.values.tolist(), strings) if s in student_strings)
                    mass[k].append(top.values.sum().item())
                    shared[k].append(kept / mass[k][-1])
            t += t_n
    one_to_one = counts["one_to_one"] / counts["student_tokens"]
    rows = {k: {"top_k_mass": statistics.mean(mass[k]), "shared_share": statistics.mean(shared[k])} for k in ks}
    print_table(
        f"the foreign teacher's top k at one-to-one positions ({one_to_one:.1%} of {counts['student_tokens']} student "
        "tokens)",
        ["k", "teacher's top-k mass", "share of it on strings the student has"],
        [[k, r["top_k_mass"], r["shared_share"]] for k, r in rows.items()],
    )
    finish(NAME, {"foreign_teacher": FOREIGN, "one_to_one_share": one_to_one, **counts, "by_k": rows}, args.smoke)


if __name__ == "__main__":
    main()
