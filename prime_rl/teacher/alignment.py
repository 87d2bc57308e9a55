"""opd from a teacher with another tokenizer (docs/cross_tokenizer.md): the student's sampled completion as text,
the teacher's tokenization of that text, and the chunks both tokenizations cut it into: runs of tokens that end
at the same byte offset of the text's UTF-8 on both sides. On each chunk both models give a logprob to the same
text."""

import functools
import itertools
import re
from dataclasses import dataclass, field

WINDOW = 32  # tokens before a token decoded with it, and tokens read at once
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # a byte-fallback token (SentencePiece's for bytes it has no piece of)


@dataclass
class Chunks:
    """A completion cut into chunks, in order: how many student tokens and how many teacher tokens each holds."""

    student: list[int]
    teacher: list[int]
    between: list[bool] = field(default_factory=list)  # per chunk: the turns between an episode's replies ([]: none)

    def extend(self, other: "Chunks", between: bool = False) -> None:
        self.student += other.student
        self.teacher += other.teacher
        self.between += [between] * len(other.student)

    def replies(self) -> "Chunks":
        """The chunks of the replies alone: what trains (the metrics' share)."""
        kept = [i for i in range(len(self.student)) if not (self.between and self.between[i])]
        return Chunks([self.student[i] for i in kept], [self.teacher[i] for i in kept])

    def starts(self) -> list[float]:
        """Per student token: 1.0 where a chunk starts (the trainer sums the student's logprobs chunk by chunk)."""
        return [float(i == 0) for n in self.student for i in range(n)]

    def teacher_sums(self, logprobs: list[float]) -> list[float]:
        """Per student token: the teacher's log p of the whole chunk the token is in (its tokens' sum)."""
        out, j = [], 0
        for s, t in zip(self.student, self.teacher):
            out += [sum(logprobs[j : j + t])] * s
            j += t
        return out

    @property
    def one_to_one(self) -> int:
        """Student tokens in chunks of one token each side: where the signal is per token, as with one tokenizer."""
        return sum(s == 1 and t == 1 for s, t in zip(self.student, self.teacher))


def text_ends(tokenizer, ids: list[int]) -> tuple[str, list[int | None]]:
    """The text `ids` decode to and, per token, the byte offset in its UTF-8 its text ends at. A token that ends
    inside a character has one where its bytes are known alone (a byte-level BPE's, a byte-fallback token's), so
    one tokenizer aligns with itself token by token; else None: its text ends with the next token's."""
    text, chars = char_ends(tokenizer, ids)
    sizes = token_sizes(tokenizer, ids)
    ends: list[int | None] = []
    inside: list[int] = []  # the tokens since the last whole character
    byte, char = 0, 0  # where that character ends
    for i, end in enumerate(chars):
        if end is None:
            inside.append(i)
            continue
        stop = byte + len(text[char:end].encode())
        ends += ends_inside(byte, stop, [sizes[k] for k in inside])
        ends.append(stop)
        byte, char, inside = stop, end, []
    return text, ends + [None] * len(inside)


def ends_inside(start: int, stop: int, sizes: list[int | None]) -> list[int | None]:
    """The byte ends of tokens between two whole-character offsets, where each one's size in bytes is known."""
    ends = list(itertools.accumulate(sizes, initial=start))[1:] if None not in sizes else []
    return ends if ends and ends[-1] < stop else [None] * len(sizes)


def token_sizes(tokenizer, ids: list[int]) -> list[int | None]:
    """Each token's size in bytes where its string spells its bytes: a byte-level BPE's (one character a byte) or
    a byte-fallback token (`<0xE2>`); None for others."""
    byte_level = is_byte_level(tokenizer)
    return [piece_size(piece, byte_level, byte_chars()) for piece in tokenizer.convert_ids_to_tokens(ids)]


def is_byte_level(tokenizer) -> bool:
    """A byte-level BPE: its decoder reads each character of a token's string as a byte."""
    decoder = tokenizer.backend_tokenizer.decoder
    return decoder is not None and b'"ByteLevel"' in decoder.__getstate__()


@functools.cache
def byte_chars() -> dict[str, int]:
    """The characters byte-level BPE spells bytes with, and the byte each stands for."""
    from prime_rl.models.tokenizer import byte_alphabet  # transformers: not for a launch's validation

    return {char: byte for byte, char in enumerate(byte_alphabet())}


def piece_size(piece: str | None, byte_level: bool, alphabet: dict[str, int]) -> int | None:
    """A token string's size in bytes; None where it does not spell them (or the id has no token: a model whose
    embedding is larger than its vocabulary may sample one)."""
    if piece is None:
        return None
    if BYTE_TOKEN.fullmatch(piece):
        return 1
    return len(piece) if byte_level and set(piece) <= alphabet.keys() else None


def char_ends(tokenizer, ids: list[int]) -> tuple[str, list[int | None]]:
    """The text `ids` decode to and, per token, the character offset its text ends at: None for a token that ends
    inside a character (a byte-level token holding part of a UTF-8 sequence), whose text the next one completes.
    Each token is decoded after up to WINDOW tokens before it, so a decoder that strips or joins (SentencePiece's
    word-start space) is read as in the whole text, and each offset is checked against the whole text."""
    [text] = decoded(tokenizer, [ids])
    ends: list[int | None] = []
    offset, span = 0, WINDOW  # where the next token's text starts; how many tokens to read at once
    while len(ends) < len(ids):
        start = len(ends)  # the token after a whole character
        stop = min(len(ids), start + span)
        head, *texts = decoded(tokenizer, [ids[max(0, start - WINDOW) : i] for i in range(start, stop + 1)])
        found = [
            offset + len(t) - len(head) if t.startswith(head) and text.startswith(t[len(head) :], offset) else None
            for t in texts
        ]
        whole = [k for k, end in enumerate(found) if end is not None]
        if not whole and stop < len(ids):  # no character ends in the span: read a longer one
            span *= 2
            continue
        found = found[: whole[-1] + 1] if whole else found
        ends += found
        offset, span = (found[-1], WINDOW) if whole else (offset, span)
    return text, ends


def decoded(tokenizer, sequences: list[list[int]]) -> list[str]:
    return tokenizer.batch_decode(sequences, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def align(student_ends: list[int | None], teacher_ends: list[int | None]) -> Chunks | None:
    """The chunks two tokenizations of one text cut it into (each token's end offset, from `text_ends`): a chunk
    ends at each offset where a token of each side ends. None where a side has tokens after the last such offset
    (tokens of no text at the end of one side only)."""
    s_last, t_last = last_index(student_ends), last_index(teacher_ends)
    chunks, i, j = Chunks([], []), -1, -1
    for end in sorted(s_last.keys() & t_last.keys()):
        chunks.student.append(s_last[end] - i)
        chunks.teacher.append(t_last[end] - j)
        i, j = s_last[end], t_last[end]
    return chunks if (i, j) == (len(student_ends) - 1, len(teacher_ends) - 1) else None


def last_index(ends: list[int | None]) -> dict[int, int]:
    """By end offset: the last token ending there (a token of no text ends where the one before it does)."""
    return {end: i for i, end in enumerate(ends) if end is not None}


class TextAlignment:
    """What a teacher with another tokenizer scores for a student's sample: the prompt in the teacher's chat
    template, the completion's text in the teacher's tokens, and the chunks of that text both tokenizations share.
    The student's end of turn is the teacher's: a chunk of one token each side."""

    def __init__(self, student, teacher):
        from prime_rl.models.chat import turn_end_ids  # transformers: not for a launch's validation

        self.student, self.teacher = student, teacher
        self.student_stops = {*turn_end_ids(student), student.eos_token_id}
        self.student_stop, self.teacher_stop = ([*turn_end_ids(t), t.eos_token_id][0] for t in (student, teacher))

    def teacher_pair(
        self, messages: list[dict], completion_ids: list[int], truncated: bool
    ) -> tuple[list[int], list[int], Chunks] | None:
        """(the teacher's prompt ids, its ids of the completion, the chunks); None where the teacher's tokens do not
        read back as the student's text."""
        from prime_rl.models.chat import prompt_ids

        found = self.reply(completion_ids, truncated)
        return None if found is None else (prompt_ids(self.teacher, messages), *found)

    def teacher_episode(
        self, messages: list[dict], tools: list[dict] | None, completion_ids: list[int], mask: list[bool]
    ) -> tuple[list[int], list[int], Chunks] | None:
        """An episode's sample (`messages`: its conversation as the environment holds it; `mask`: true at the
        student's replies) as the teacher reads it: its first prompt in the teacher's template, then each reply's
        text in the teacher's tokens, aligned as a single reply's, and the turns between replies as the teacher's
        template renders them, one chunk each side (context: not scored). None where a reply does not read back."""
        from prime_rl.models.chat import next_turn_ids, prompt_ids

        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"] + [len(messages)]
        ids, chunks, reply, replies = [], Chunks([], []), [], 0
        for is_reply, run in itertools.groupby(range(len(completion_ids)), key=mask.__getitem__):
            run = list(run)
            if is_reply:
                found = self.reply(completion_ids[run[0] : run[-1] + 1], truncated=False)
                if found is None:
                    return None
                reply, reply_chunks = found
                ids += reply
                chunks.extend(reply_chunks)
                replies += 1
            else:  # the messages after the last reply, up to the next one, and the generation prompt
                at, following = turns[replies - 1], messages[turns[replies - 1] + 1 : turns[replies]]
                bridge = next_turn_ids(self.teacher, messages[:at], following, reply, tools)
                ids += bridge
                chunks.extend(Chunks([len(run)], [len(bridge)]), between=True)
        return prompt_ids(self.teacher, messages[: turns[0]], tools), ids, chunks

    def reply(self, completion_ids: list[int], truncated: bool) -> tuple[list[int], Chunks] | None:
        """(the teacher's ids of a reply's text, the chunks), its end of turn the teacher's own where the student
        ended its turn itself; None where the teacher's tokens do not read back as the student's text."""
        stopped = bool(completion_ids) and not truncated and completion_ids[-1] in self.student_stops
        text, student_ends = text_ends(self.student, completion_ids[:-1] if stopped else completion_ids)
        teacher_ids = self.teacher.encode(text, add_special_tokens=False)
        teacher_text, teacher_ends = text_ends(self.teacher, teacher_ids)
        chunks = align(student_ends, teacher_ends) if teacher_text == text else None
        if chunks is None:
            return None
        if stopped:
            chunks.student.append(1)
            chunks.teacher.append(1)
            teacher_ids.append(self.teacher_stop)
        return teacher_ids, chunks


def unreadable(tokenizer, texts: list[str]) -> tuple[int, str] | None:
    """(index, text) of the first of `texts` the tokenizer does not read back as itself (a character it maps to
    <unk>, or normalises away), from where the two first differ; None if it reads back every one."""
    back = decoded(tokenizer, tokenizer(texts, add_special_tokens=False)["input_ids"])
    for i, (text, read) in enumerate(zip(texts, back)):
        if text != read:
            at = next((k for k, (a, b) in enumerate(zip(text, read)) if a != b), min(len(text), len(read)))
            return i, text[at : at + 40]
    return None
