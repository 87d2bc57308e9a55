"""trainer.loss.distill=topk from a teacher with another tokenizer (docs/cross_tokenizer.md): at the first token of
each chunk both models predict the next piece of the same text, so the teacher's top k there compares with the
student's over the tokens whose text both vocabularies have. A teacher token the student cannot spell in one token
is left out; its mass goes to the trainer's tail bucket with everything else the top k does not list."""

import math

from prime_rl.inference.client import TopLogprobs
from prime_rl.teacher.alignment import BYTE_TOKEN, Chunks, TextAlignment, byte_chars, decoded, is_byte_level

UNLISTED = -1  # an id that pads a position's top k (its logprob -inf): the trainer reads it as no token


class SharedTokens:
    """The teacher's ids whose text is one student token, by the tokens' UTF-8 bytes: special tokens by their
    string, and the teacher's end of turn as the student's."""

    def __init__(self, aligner: TextAlignment):
        self.teacher, self.teacher_specials = aligner.teacher, special_tokens(aligner.teacher)
        self.student_ids = by_bytes(aligner.student)
        self.student_specials = {t.content: i for i, t in special_tokens(aligner.student).items()}
        # by teacher id, filled as ids come
        self.known: dict[int, int | None] = {aligner.teacher_stop: aligner.student_stop}

    def student_top(self, top: TopLogprobs, chunks: Chunks, k: int) -> tuple[TopLogprobs, list[float]]:
        """The teacher's top k (at its completion positions) at the student's: at each chunk's first token, the
        listed ids the student has, padded with UNLISTED to k; nothing at a chunk's other tokens, nor at the turns
        between an episode's replies. Also, per reply chunk, the share of the top-k mass the student has."""
        ids, logprobs, shared = [], [], []
        t = 0
        for n, (s_n, t_n) in enumerate(zip(chunks.student, chunks.teacher)):
            reply = t_n > 0 and not (chunks.between and chunks.between[n])
            listed = self.listed(top.ids[t], top.logprobs[t]) if reply else {}
            if reply:
                shared.append(sum(map(math.exp, listed.values())) / sum(map(math.exp, top.logprobs[t])))
            pad = [UNLISTED] * (k - len(listed)), [-math.inf] * (k - len(listed))
            ids += [[*listed, *pad[0]]] + [[UNLISTED] * k] * (s_n - 1)
            logprobs += [[*listed.values(), *pad[1]]] + [[-math.inf] * k] * (s_n - 1)
            t += t_n
        return TopLogprobs(ids, logprobs), shared

    def listed(self, teacher_ids: list[int], logprobs: list[float]) -> dict[int, float]:
        """By student id, the logprob of the listed teacher ids that spell it (two ids of the same text add up)."""
        out: dict[int, float] = {}
        for i, lp in zip(teacher_ids, logprobs):
            s = self.student_id(i)
            if s is not None:
                out[s] = lp if s not in out else math.log(math.exp(out[s]) + math.exp(lp))
        return out

    def student_id(self, teacher_id: int) -> int | None:
        if teacher_id not in self.known:
            special = self.teacher_specials.get(teacher_id)
            if special is not None:
                self.known[teacher_id] = self.student_specials.get(special.content)
            else:
                [text] = token_bytes(self.teacher, [teacher_id])
                self.known[teacher_id] = self.student_ids.get(text)
        return self.known[teacher_id]


def special_tokens(tokenizer) -> dict:
    """By id, the tokenizer's special tokens (AddedToken): markup, not text (a byte-fallback token added as special
    is text)."""
    return {
        i: t for i, t in tokenizer.added_tokens_decoder.items() if t.special and not BYTE_TOKEN.fullmatch(t.content)
    }


def by_bytes(tokenizer) -> dict[bytes, int]:
    """A tokenizer's ids by their text's bytes, special tokens left out; where a byte-fallback token and a piece
    spell the same byte, the piece's (what the tokenizer makes of that text)."""
    specials = special_tokens(tokenizer)
    ids = [i for i in range(len(tokenizer)) if i not in specials]
    fallback = {
        i for i, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids)) if piece and BYTE_TOKEN.fullmatch(piece)
    }
    out: dict[bytes, int] = {}
    for i, text in sorted(zip(ids, token_bytes(tokenizer, ids)), key=lambda pair: pair[0] in fallback):
        if text is not None:
            out.setdefault(text, i)
    return out


def token_bytes(tokenizer, ids: list[int]) -> list[bytes | None]:
    """Each token's text as UTF-8 bytes: what its string spells where it spells bytes (a byte-level BPE's token, a
    byte-fallback token), else its text decoded after another token, as it reads inside a text (a word-start
    marker reads as the space it stands for); None for part of a character, or an id with no token."""
    pieces = tokenizer.convert_ids_to_tokens(ids)
    byte_level, values = is_byte_level(tokenizer), byte_chars()
    out: list[bytes | None] = [None] * len(ids)
    rest = []  # indices whose text is decoded
    for n, piece in enumerate(pieces):
        if piece is None:
            continue
        if BYTE_TOKEN.fullmatch(piece):
            out[n] = bytes([int(piece[3:5], 16)])
        elif byte_level and set(piece) <= values.keys():
            out[n] = bytes(values[c] for c in piece)
        else:
            rest.append(n)
    anchor = tokenizer.encode("a", add_special_tokens=False)[-1:]
    head, *texts = decoded(tokenizer, [anchor] + [anchor + [ids[n]] for n in rest])
    for n, text in zip(rest, texts):
        if text.startswith(head) and "\ufffd" not in text:
            out[n] = text[len(head) :].encode() or None
    return out
