"""opd from a teacher with another tokenizer (docs/cross_tokenizer.md): the text offsets of two tokenizations, the
chunks they share, the chunk-level advantage in the trainer, exactness where the tokenizers agree, and a run on
real vLLM servers with a teacher of another tokenizer and chat template."""

import json
import math
import random
import re

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from prime_rl.config import compose_config
from prime_rl.config.schema import DistillSignal, LossConfig
from prime_rl.config.user_error import UserError
from prime_rl.inference.client import TopLogprobs
from prime_rl.models.chat import answer_ids, prompt_ids, transcript_ids
from prime_rl.models.tokenizer import build_bpe_tokenizer, build_tokenizer
from prime_rl.orchestrator.scoring import keep_scores
from prime_rl.prepare import prepare_teacher
from prime_rl.protocol.batch import TEACHER_CHUNKS, TEACHER_LOGPROBS, Sample
from prime_rl.protocol.servers import TEACHER_MODEL_NAME
from prime_rl.tasks import load_task
from prime_rl.teacher.alignment import Chunks, TextAlignment, align, char_ends, decoded, text_ends, unreadable
from prime_rl.teacher.shared_tokens import UNLISTED, SharedTokens, token_bytes
from prime_rl.trainer.data import collate_rows
from prime_rl.trainer.loss import distill_center, rl_loss, top_k_distill
from tests.http_stub import RecordingProxy
from tests.test_e2e_rl import launch, rows
from tests.test_e2e_teachers import HINT
from tests.vllm_server import serve

ALPHABET = "abc xyz,.é🦊ü\n"  # one-byte, two-byte and four-byte characters, spaces, a newline
WORDS = ["hello", "world", "abcdef", "the quick brown fox", "naïve café", "zebra"]
CONVERSATIONS = [
    [{"role": "user", "content": f"reverse: {w}"}, {"role": "assistant", "content": w[::-1]}] for w in WORDS
]


def sentencepiece_like() -> PreTrainedTokenizerFast:
    """A Metaspace tokenizer (word-start `▁`, byte fallback) as Llama 2, Mistral and Gemma have: its decoder
    strips the text's leading space, which a token's offset must read as the whole text does."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("▁"), behavior="merged_with_next")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "</s>", *bytes_], show_progress=False)
    tok.train_from_iterator([" ".join(WORDS)] * 10, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, PreTrainedTokenizerFast]:
    return {"char": build_tokenizer(), "bpe": build_bpe_tokenizer(CONVERSATIONS, 400), "sp": sentencepiece_like()}


def random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 120))) for _ in range(n)]


def test_each_tokens_end_offset_is_where_the_whole_texts_prefix_ends(tokenizers):
    """char_ends decodes in windows; its offsets are those of decoding every prefix (the slow, plain definition),
    for byte-level, character and SentencePiece-like tokenizers; text_ends reads them in bytes, and a token that
    ends inside a character has a byte offset where its bytes are known (byte-level and byte-fallback tokens)."""
    for name, tok in tokenizers.items():
        for text in random_texts(150):
            ids = tok.encode(text, add_special_tokens=False)
            prefixes = decoded(tok, [ids[: i + 1] for i in range(len(ids))])
            whole, chars = char_ends(tok, ids)
            assert chars == [len(p) if whole.startswith(p) else None for p in prefixes][: len(ids)], (name, text)
            assert whole == decoded(tok, [ids])[0] and text_ends(tok, ids)[0] == whole
            in_bytes = text_ends(tok, ids)[1]
            assert all(b == len(whole[:c].encode()) for b, c in zip(in_bytes, chars) if c is not None), (name, text)
    fox = tokenizers["char"].encode("🦊", add_special_tokens=False)  # four bytes, four tokens
    assert char_ends(tokenizers["char"], fox) == ("🦊", [None, None, None, 1])
    assert text_ends(tokenizers["char"], fox) == ("🦊", [1, 2, 3, 4])
    beyond = len(tokenizers["char"]) + 10  # an id of the tiny model's padded embedding: sampled, it has no text
    assert text_ends(tokenizers["char"], [*fox, beyond]) == ("🦊", [1, 2, 3, 4, 4])
    sp = tokenizers["sp"]
    emoji = sp.encode("a🦊", add_special_tokens=False)  # `▁` (no text: stripped), `a`, then 4 byte-fallback tokens
    assert sp.convert_ids_to_tokens(emoji)[-4:] == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x8A>"]
    assert text_ends(sp, emoji) == ("a🦊", [0, 1, 2, 3, 4, 5])


def test_two_tokenizations_of_a_text_share_chunks_that_hold_the_same_text(tokenizers):
    """Every chunk's student tokens hold exactly the bytes its teacher tokens hold, the chunks cover both sides in
    order, and a teacher of the same tokenizer gives chunks of one token each side, multi-byte characters too."""
    pairs = [("char", "bpe"), ("bpe", "char"), ("char", "sp"), ("sp", "bpe"), ("char", "char"), ("bpe", "bpe")]
    for text in random_texts(60, seed=1):
        for student_name, teacher_name in pairs:
            student, teacher = tokenizers[student_name], tokenizers[teacher_name]
            s_ids = student.encode(text, add_special_tokens=False)
            t_ids = teacher.encode(decoded(student, [s_ids])[0], add_special_tokens=False)
            s_text, s_ends = text_ends(student, s_ids)
            t_text, t_ends = text_ends(teacher, t_ids)
            if s_text != t_text:  # the SentencePiece stand-in strips a leading space: not read back
                assert "sp" in (student_name, teacher_name), (text, s_text, t_text)
                continue
            chunks = align(s_ends, t_ends)
            assert sum(chunks.student) == len(s_ids) and sum(chunks.teacher) == len(t_ids)
            i = j = 0
            for s, t in zip(chunks.student, chunks.teacher):
                assert s_ends[i + s - 1] == t_ends[j + t - 1], (text, student_name, teacher_name)
                i, j = i + s, j + t
            if student_name == teacher_name:
                assert chunks.one_to_one == len(s_ids), (text, student_name)


def test_any_sampled_ids_are_scored_in_whole_chunks_or_not_at_all(tokenizers):
    """What a student samples need not be text: bytes of no character, ids of its padded embedding with no token,
    special tokens mid-reply. Each reply either aligns (the chunks cover both sides) or is left unscored."""
    char, bpe = tokenizers["char"], tokenizers["bpe"]
    aligner, rng = TextAlignment(char, bpe), random.Random(2)
    messages = [{"role": "user", "content": "reverse: abc"}]
    scored = 0
    for _ in range(300):
        reply = [rng.randrange(len(char) + 20) for _ in range(rng.randint(0, 40))]
        pair = aligner.teacher_pair(messages, reply, truncated=rng.random() < 0.5)
        if pair is not None:
            _, completion, chunks = pair
            assert sum(chunks.student) == len(reply) and sum(chunks.teacher) == len(completion)
            assert min(chunks.student + chunks.teacher, default=1) >= 1
            scored += 1
    assert scored > 150  # most are: a reply is lost only where the teacher cannot read its text back


def test_the_teacher_sees_its_own_chat_template_and_the_students_end_of_turn_as_its_own(tokenizers):
    """A sampled reply (its end-of-turn token included) becomes the teacher's prompt in its own template and the
    reply's text in its own tokens, its end of turn a chunk of one token each side; a reply cut off has none."""
    char, bpe = tokenizers["char"], tokenizers["bpe"]
    messages = [{"role": "user", "content": "reverse: hello"}]
    reply = answer_ids(char, messages, "olleh")
    prompt, completion, chunks = TextAlignment(char, bpe).teacher_pair(messages, reply, truncated=False)
    assert prompt == prompt_ids(bpe, messages) and "You are a helpful assistant." in bpe.decode(prompt)
    assert completion == answer_ids(bpe, messages, "olleh")  # the teacher's own tokens of the text, its end of turn
    assert (chunks.student[-1], chunks.teacher[-1]) == (1, 1) and sum(chunks.student) == len(reply)
    _, cut, cut_chunks = TextAlignment(char, bpe).teacher_pair(messages, reply[:-1], truncated=True)
    assert bpe.decode(cut) == "olleh" and sum(cut_chunks.teacher) == len(cut)


def test_where_the_tokenizers_agree_the_text_path_sends_the_same_tokens_and_the_trainer_the_same_signal(tokenizers):
    """The exactness the fast path is measured against: a teacher with the student's tokenizer, aligned on text,
    is asked for the very tokens today's path sends, every chunk is one token, and the loss, its gradient and
    teacher_kl are the same to the bit."""
    char = tokenizers["char"]
    messages = [{"role": "user", "content": "reverse: naïve 🦊"}]
    reply = answer_ids(char, messages, "🦊 evïan")
    prompt, completion, chunks = TextAlignment(char, char).teacher_pair(messages, reply, truncated=False)
    assert (prompt, completion) == (prompt_ids(char, messages), reply) and chunks.one_to_one == len(reply)
    teacher = [-0.5 - 0.01 * i for i in range(len(reply))]
    assert chunks.teacher_sums(teacher) == teacher and chunks.starts() == [1.0] * len(reply)
    base = Sample(prompt, reply, [-0.7] * len(reply), advantage=0.5, streams={TEACHER_LOGPROBS: teacher})
    on_text = Sample(**{**vars(base), "streams": {TEACHER_LOGPROBS: teacher, TEACHER_CHUNKS: chunks.starts()}})
    results = [loss_and_grad([[base]]), loss_and_grad([[on_text]])]
    assert results[0] == results[1]


# an episode of the retry environment: a wrong reply, the environment's next message, the right one
EPISODE = [
    {"role": "user", "content": "reverse: naïve 🦊"},
    {"role": "assistant", "content": "🦊 evian"},
    {"role": "user", "content": "Not quite. Try again."},
    {"role": "assistant", "content": "🦊 evïan"},
]


def test_an_episode_is_read_by_a_teacher_of_the_same_tokenizer_as_its_very_ids_and_replies_alone_are_scored(
    tokenizers,
):
    """The exactness of the fast path, turn by turn: a teacher with the student's tokenizer and template reads an
    episode (its conversation as the environment holds it: the last reply's message is not in it) as its very ids,
    every reply token a chunk of its own carrying its own logprob, and the turn between replies one chunk of context."""
    char = tokenizers["char"]
    prompt, ids, mask = transcript_ids(char, EPISODE)
    teacher_prompt, teacher_ids, chunks = TextAlignment(char, char).teacher_episode(EPISODE[:-1], None, ids, mask)
    assert (teacher_prompt, teacher_ids) == (prompt, ids)
    replies = chunks.replies()
    assert replies.one_to_one == sum(mask) == sum(replies.student) and sum(chunks.student) == len(ids)
    logprobs = [-0.01 * i for i in range(len(ids))]
    sums = chunks.teacher_sums(logprobs)
    assert [v for v, trains in zip(sums, mask) if trains] == [v for v, trains in zip(logprobs, mask) if trains]


def test_an_episode_is_read_by_a_teacher_of_another_tokenizer_as_its_own_transcript_of_the_conversation(tokenizers):
    """A teacher of another tokenizer and chat template reads the episode as it would its own transcript of the same
    conversation: its first prompt, each reply's text in its tokens with its own end of turn, the turn between in its
    template; the replies' chunks cover the student's trained tokens, the turn between is one chunk."""
    char, bpe = tokenizers["char"], tokenizers["bpe"]
    _, ids, mask = transcript_ids(char, EPISODE)
    prompt, teacher_ids, chunks = TextAlignment(char, bpe).teacher_episode(EPISODE[:-1], None, ids, mask)
    own_prompt, own_ids, own_mask = transcript_ids(bpe, EPISODE)
    assert (prompt, teacher_ids) == (own_prompt, own_ids)
    assert sum(chunks.student) == len(ids) and sum(chunks.teacher) == len(teacher_ids)
    assert sum(chunks.replies().student) == sum(mask) and sum(chunks.replies().teacher) == sum(own_mask)
    assert chunks.between.count(True) == 1 and chunks.replies().one_to_one < sum(mask)  # BPE pieces span letters


def loss_and_grad(rows: list[list[Sample]], seed: int = 0):
    """opd's loss on `rows` with the same made-up policy logprobs: (loss, gradient, teacher_kl, the step's centre)."""
    batch = collate_rows(rows, pad_id=0)
    torch.manual_seed(seed)
    logprobs = (batch.inference_logprobs + 0.1 * torch.randn(batch.inference_logprobs.shape)).requires_grad_()
    cfg = LossConfig(adv_tau=1.0, teacher_tau=0.5, teacher_adv_clip=0.0)
    center = distill_center([batch], cfg)
    loss, sums = rl_loss(logprobs, batch, cfg, total_tokens=10, teacher_center=center)
    loss.backward()
    return loss.item(), logprobs.grad.tolist(), sums["teacher_kl"], center


def test_a_chunks_advantage_is_the_teachers_log_p_of_its_text_less_the_students_at_each_of_its_tokens():
    """By hand, in a packed row beside a sample scored token by token: chunk (a, b | A) and (c | C) give a and b
    the advantage log p_T(A) - (log pi(a) + log pi(b)), c its own; teacher_kl sums each chunk once."""
    t_ab, t_c = -1.0, -0.3
    chunked = Sample([1], [5, 6, 7], [-0.4, -0.6, -0.2], streams={TEACHER_LOGPROBS: [t_ab, t_ab, t_c]})
    chunked.streams[TEACHER_CHUNKS] = [1.0, 0.0, 1.0]
    per_token = Sample([2, 3], [8, 9], [-0.5, -0.1], streams={TEACHER_LOGPROBS: [-0.2, -0.9]})
    batch = collate_rows([[chunked, per_token]], pad_id=0)
    logprobs = batch.inference_logprobs.clone().requires_grad_()  # on policy: the ratio is 1
    cfg = LossConfig(adv_tau=0.0, teacher_tau=1.0, teacher_adv_clip=0.0, teacher_adv_center=False)
    loss, sums = rl_loss(logprobs, batch, cfg, total_tokens=5, teacher_center=0.0)
    loss.backward()
    chunk_ab = t_ab - (-0.4 - 0.6)
    advantages = [chunk_ab, chunk_ab, t_c + 0.2, -0.2 + 0.5, -0.9 + 0.1]
    completion = [1, 2, 3, 6, 7]  # the completion tokens' positions in the packed row
    assert logprobs.grad[0, completion].tolist() == pytest.approx([-a / 5 for a in advantages])
    assert sums["teacher_kl"] == pytest.approx(-(chunk_ab + t_c + 0.2 - 0.2 + 0.5 - 0.9 + 0.1))
    with_center = LossConfig(adv_tau=0.0, teacher_tau=1.0, teacher_adv_clip=0.0)
    assert distill_center([batch], with_center) == pytest.approx(sum(advantages) / 5)


def test_each_tokens_text_in_bytes_and_the_teachers_tokens_the_student_spells_in_one(tokenizers):
    """A text's tokens' bytes, joined, are its UTF-8 (after the word-start space a SentencePiece normaliser puts
    first), for byte-level, character and byte-fallback tokens alike. A teacher token maps to the student's token
    of the same bytes: itself with one tokenizer; across vocabularies a one-byte token to the student's byte, a
    longer one to nothing (the student spells it in several), special tokens by their string."""
    for name, tok in tokenizers.items():
        for text in random_texts(80, seed=3):
            ids = tok.encode(text, add_special_tokens=False)
            spaced = name == "sp" and ids
            assert b"".join(token_bytes(tok, ids)) == b" " * bool(spaced) + text.encode(), (name, text)
    char, bpe = tokenizers["char"], tokenizers["bpe"]
    same, foreign = SharedTokens(TextAlignment(char, char)), SharedTokens(TextAlignment(char, bpe))
    assert [same.student_id(i) for i in range(len(char))] == list(range(len(char)))
    for piece, i in bpe.get_vocab().items():
        expected = char.convert_tokens_to_ids(piece) if len(piece) == 1 or piece in char.all_special_tokens else None
        assert foreign.student_id(i) == expected, piece


def test_a_foreign_teachers_top_k_is_listed_at_each_chunks_first_token_over_the_tokens_both_have(tokenizers):
    """By hand: chunks (a, b | A), (c | C), (end | end); the teacher's top 3 at A lists a longer token the student
    has not (its mass to the tail), at C two ids of one text (a byte-fallback token and a piece: their
    probabilities add up). Listed at a and c and the end of turn, nothing at b; the share of the top-k mass the
    student has, per chunk."""
    char, sp = tokenizers["char"], tokenizers["sp"]
    shared = SharedTokens(TextAlignment(char, sp))
    longer = next(i for piece, i in sp.get_vocab().items() if len(piece) > 2 and piece.startswith("▁"))
    [x, o] = [sp.convert_tokens_to_ids(p) for p in ("x", "o")]
    [cx, co, c_end] = [char.convert_tokens_to_ids(p) for p in ("x", "o", "<|im_end|>")]
    top = TopLogprobs(
        [[longer, x, o], [o, sp.convert_tokens_to_ids("<0x6F>"), x], [sp.eos_token_id, x, longer]],
        [[-0.2, -1.9, -3.0], [-0.5, -1.5, -2.5], [-0.1, -3.0, -4.0]],
    )
    listed, mass = shared.student_top(top, Chunks([2, 1, 1], [1, 1, 1]), k=3)
    assert listed.ids == [[cx, co, UNLISTED], [UNLISTED] * 3, [co, cx, UNLISTED], [c_end, cx, UNLISTED]]
    inf = math.inf
    expected = [[-1.9, -3.0, -inf], [-inf] * 3, [math.log(math.exp(-0.5) + math.exp(-1.5)), -2.5, -inf]]
    assert listed.logprobs == expected + [[-0.1, -3.0, -inf]]
    share = [
        sum(map(math.exp, kept)) / sum(map(math.exp, lp))
        for kept, lp in (([-1.9, -3.0], [-0.2, -1.9, -3.0]), ([-0.1, -3.0], [-0.1, -3.0, -4.0]))
    ]
    assert mass == pytest.approx([share[0], 1.0, share[1]])


def top_k_loss(rows: list[list[Sample]], vocab: int, seed: int = 0):
    """distill=topk's term on `rows` under made-up student logits: (loss, the logits' gradient, metric sums)."""
    batch = collate_rows(rows, pad_id=0)
    torch.manual_seed(seed)
    logits = torch.randn(*batch.input_ids.shape, vocab, requires_grad=True)
    student = logits.log_softmax(-1)
    tokens = student.gather(-1, batch.input_ids[..., None])[..., 0]
    cfg = LossConfig(teacher_tau=0.5, distill=DistillSignal.topk)
    loss, sums = top_k_distill(student.gather(-1, batch.teacher_top_ids), tokens, batch, cfg, total_tokens=10)
    loss.backward()
    return loss.item(), logits.grad, sums


def test_where_the_tokenizers_agree_the_text_paths_top_k_is_the_fast_paths_to_the_bit(tokenizers):
    """A teacher of the student's tokenizer on the text path: every chunk one token, each listed id the student's
    own, the whole mass shared; the trainer's top-k loss, gradient and metrics are the fast path's to the bit."""
    char = tokenizers["char"]
    messages = [{"role": "user", "content": "reverse: naïve 🦊"}]
    reply = answer_ids(char, messages, "🦊 evïan")
    aligner, rng, k = TextAlignment(char, char), random.Random(4), 4
    prompt, completion, chunks = aligner.teacher_pair(messages, reply, truncated=False)
    logprobs = [sorted((-rng.uniform(0.1, 4) for _ in range(k)), reverse=True) for _ in completion]
    top = TopLogprobs([rng.sample(range(len(char)), k) for _ in completion], logprobs)
    listed, mass = SharedTokens(aligner).student_top(top, chunks, k)
    assert listed == top and mass == [1.0] * len(reply)
    teacher = [lp[0] for lp in logprobs]
    fast, on_text = (Sample(prompt, reply, [-0.7] * len(reply)) for _ in range(2))
    keep_scores(fast, teacher, top, k, "t")
    keep_scores(on_text, chunks.teacher_sums(teacher), listed, k, "t")
    on_text.streams[TEACHER_CHUNKS] = chunks.starts()
    a, b = top_k_loss([[fast]], len(char)), top_k_loss([[on_text]], len(char))
    assert a[0] == b[0] and torch.equal(a[1], b[1]) and a[2] == b[2]


def test_a_top_k_with_unlisted_ids_compares_the_listed_ones_and_the_tail_and_nothing_at_a_chunks_other_tokens():
    """By hand, in a packed row beside a sample with a full top 2: the foreign teacher's sample lists one id at its
    first token (the other slot UNLISTED) and none at its second. Its KL is over {that id, the tail} at the first
    token alone; the unlisted slots and the second token get no gradient."""
    inf = math.inf
    foreign = Sample([1], [5, 6], [-0.4, -0.6], streams={TEACHER_LOGPROBS: [-1.0, -1.0], TEACHER_CHUNKS: [1.0, 0.0]})
    foreign.teacher_top_ids = torch.tensor([[7, UNLISTED], [UNLISTED, UNLISTED]], dtype=torch.int32)
    foreign.teacher_top_logprobs = torch.tensor([[-0.5, -inf], [-inf, -inf]])
    full = Sample([2], [8], [-0.3], streams={TEACHER_LOGPROBS: [-0.2]})
    full.teacher_top_ids = torch.tensor([[3, 4]], dtype=torch.int32)
    full.teacher_top_logprobs = torch.tensor([[-0.2, -2.0]])
    batch = collate_rows([[foreign, full]], pad_id=0)
    assert batch.has_teacher_top.tolist() == [[False, True, False, False, True]]
    top = torch.log(torch.tensor([[[0.5, 0.5], [0.3, 0.9], [0.2, 0.2], [0.5, 0.5], [0.6, 0.1]]])).requires_grad_()
    cfg = LossConfig(teacher_tau=0.5, distill=DistillSignal.topk)
    loss, sums = top_k_distill(top, batch.inference_logprobs, batch, cfg, total_tokens=3)
    loss.backward()

    def kl(q: list[float], p: list[float]) -> float:  # reverse KL over the listed ids and the tail
        q, p = [*q, 1 - sum(q)], [*p, 1 - sum(p)]
        return sum(a * (math.log(a) - math.log(b)) for a, b in zip(q, p))

    kls = [kl([0.3], [math.exp(-0.5)]), kl([0.6, 0.1], [math.exp(-0.2), math.exp(-2.0)])]
    assert loss.item() == pytest.approx(0.5 * sum(kls) / 3) and sums["distill/topk_kl"] == pytest.approx(sum(kls))
    assert top.grad[0, 1, 1] == 0 and not top.grad[0, 2].any() and top.grad[0, 1, 0] != 0


def test_a_tokenizer_that_cannot_read_a_text_back_names_it():
    """A word-level tokenizer maps what it does not know to <unk>: the first text it loses is named from there."""
    vocab = {"<unk>": 0, "reverse": 1, "abc": 2, "cba": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    words = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    assert unreadable(words, ["reverse abc", "cba"]) is None
    assert unreadable(words, ["reverse abc", "reverse xyz now"]) == (1, "xyz now")


def test_a_teacher_of_another_tokenizer_is_aligned_on_text_unless_the_run_wants_tokens(tmp_path):
    """The launcher's resolution (launcher/preflight/; tests/test_models.py: without loading a tokenizer where
    the files agree): the student's tokenizer gets tokens, another vocabulary text, named with the reason."""
    from prime_rl.launcher.preflight.teachers import teacher_alignments

    student, other = tmp_path / "student", tmp_path / "other"
    build_tokenizer().save_pretrained(student)
    build_bpe_tokenizer(CONVERSATIONS, 400).save_pretrained(other)

    def alignment(teacher, *more):
        cfg = compose_config(["training_mode=opd", f"model.name={student}", f"teacher.model={teacher}", *more])
        resolved, alignments = teacher_alignments(cfg, load_task(cfg.task), build_tokenizer)
        assert resolved.teacher.alignment.value == alignments["teacher"].split()[0]
        return alignments["teacher"]

    assert alignment(student) == "tokens (its tokenizer is the student's)"
    assert alignment(other) == "text (its tokenizer differs from the student's: vocab)"
    assert alignment(student, "teacher.alignment=text") == "text (teacher.alignment=text)"
    with pytest.raises(UserError) as err:
        alignment(other, "teacher.alignment=tokens")
    assert err.value.keys == ["teacher.alignment"] and "(vocab)" in str(err.value)
    top_k = alignment(other, "trainer.loss.distill=topk", "trainer.loss.distill_top_k=4")  # over the shared tokens
    assert top_k == "text (its tokenizer differs from the student's: vocab)"


@pytest.fixture(scope="module")
def bpe_teacher():
    """A teacher on a byte-level BPE of the task's text (320 tokens) with a Qwen-style chat template (a default system
    turn): another tokenizer and template than the default student's one token per byte. 60 warm-start steps: the
    run tests the mechanics; how it teaches is bench/cross_tokenizer.py's."""
    overrides = ["training_mode=opd", "model.tiny.tokenizer=bpe", "teacher.warm_start.steps=60"]
    return prepare_teacher(compose_config(overrides))


def scored_sequences(posts: list[tuple[str, dict]]) -> list[tuple[int, ...]]:
    """The sequences the top-k runs had scored, in order: not the probes (prompt logprobs alone, or [0, 1])."""
    return [
        tuple(ids)
        for path, body in posts
        if path == "/v1/completions" and body.get("prompt_logprobs") == 8
        for ids in body["prompt"]
        if ids != [0, 1]
    ]


@pytest.mark.vllm
def test_opd_from_teachers_with_another_tokenizer_scores_chunks_of_text(tmp_path, bpe_teacher, standing_servers):
    """A real run, a mix of three opd sources: one taught by a local teacher of another tokenizer and chat template,
    one by the same model behind an external vLLM endpoint (its tokenizer named by teacher.tokenizer), and episodes
    of the retry environment taught by the local teacher (each reply aligned within its own turn). The plan
    says each scores on text and why; every step scores the samples in chunks (the BPE teacher's tokens span
    several of the student's) at the right teacher, and the teacher term is in the loss. Then a run distilling
    from the external teacher's top k (trainer.loss.distill=topk) over the tokens both vocabularies have. The
    external teacher of the mix has a system prompt that shows it the answer (teacher.system_prompt): it is in each
    prompt that teacher scores after, in its own tokens, and in none of the student's."""
    run_dir = tmp_path / "run"
    with serve(bpe_teacher, tmp_path, served_name="foreign", student=False) as url:
        proxy = RecordingProxy(url)
        remote = (
            f"++teachers={{remote:{{kind:external,model:foreign,base_url:'{proxy.url}/v1',tokenizer:'{bpe_teacher}',"
            f"system_prompt:'{HINT}'}}}}"
        )
        run = launch(
            run_dir,
            "training_mode=opd",
            f"teacher.model={bpe_teacher}",
            "task=mix",
            "task.mix=[{name:reverse,label:local},{name:reverse,label:remote,teacher:remote},"
            "{name:gym,env:prime_rl.tasks.retry_env:ReverseRetry,max_turns:3,options:{tries:3},label:retry}]",
            remote,
            "model.warm_start.task=reverse",  # the built-in reverse student: no build for the mix
            "orchestrator.log_samples=128",  # every sample: both sources' teachers are seen
            "debug=smoke",
            standing=standing_servers,
        )
        stored = RecordingProxy(url)  # what the top-k runs ask the endpoint
        top_k_run = [
            "training_mode=opd",
            "teacher=external",
            f"teacher.base_url={stored.url}/v1",
            "teacher.model=foreign",
            "teacher.api_key_env=null",  # a local endpoint with no key
            f"teacher.tokenizer={bpe_teacher}",
            "trainer.loss.distill=topk",
            "trainer.loss.distill_top_k=8",
            f"teacher.cache_dir={tmp_path / 'store'}",  # its scores kept, and read again
            "task.num_train=16",  # every step's 16 prompts the same: the student's replies repeat
            "debug=smoke",
        ]
        top_k_dir = tmp_path / "top_k"
        top_k = launch(top_k_dir, *top_k_run, standing=standing_servers)
        first_run = scored_sequences(stored.posts)
        again = launch(tmp_path / "again", *top_k_run, "max_steps=1", standing=standing_servers)
        second_run = scored_sequences(stored.posts)[len(first_run) :]
        endpoint_log = next(tmp_path.glob("vllm-foreign-*.log")).read_text()
        proxy.close()
        stored.close()
    assert top_k.returncode == 0, top_k.stderr[-3000:]
    train = [r for r in rows(top_k_dir) if "loss" in r]
    assert [r["step"] for r in train] == [0, 1, 2]
    for r in train:  # the foreign teacher's top 8 over the tokens the student has: most of its mass
        assert 0.5 < r["distill/topk_shared_mass"] <= 1 and 0 < r["distill/teacher_tail"], r
        assert r["distill/topk_kl"] > 0 and math.isfinite(r["teacher_kl"]) and r["distill/unscored"] < 0.05, r
    # the store: the endpoint was asked for each sequence once over both runs, what it held was read instead (the
    # same reply sampled twice in a step, again in later steps, again by the second run)
    assert again.returncode == 0, again.stderr[-3000:]
    [again_row] = [r for r in rows(tmp_path / "again") if "loss" in r]
    assert sum(r["teacher/store_misses"] for r in train) == len(first_run) and all(
        r["teacher/store_hits"] > 0 for r in train
    ), train
    assert again_row["teacher/store_misses"] == len(second_run) and again_row["teacher/store_hits"] > 0, again_row
    assert len(set(first_run + second_run)) == len(first_run + second_run) > 0
    assert run.returncode == 0, run.stderr[-3000:]
    plan = json.loads((run_dir / "configs" / "plan.json").read_text())
    assert plan["teacher_alignment"] == {
        "teacher": "text (its tokenizer differs from the student's: vocab)",
        "teachers.remote": "text (its tokenizer differs from the student's: its /tokenize splits the task's text "
        "otherwise)",
    }
    train = [r for r in rows(run_dir) if "loss" in r]
    assert [r["step"] for r in train] == [0, 1, 2]
    for r in train:
        # a sampled reply the teacher does not read back is not scored: bytes of no character, a mark NFC composes
        assert r["distill/unscored"] < 0.05 and 0 < r["distill/aligned_fraction"] < 1, r
        assert r["distill/chunk_student_tokens"] > 1 and r["distill/chunk_teacher_tokens"] >= 1, r
        assert math.isfinite(r["teacher_kl"]) and r["teacher_kl"] != 0, r
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    scored = {(s["source"], s["teacher"]) for s in samples if s["teacher"]}  # unscored: no teacher
    assert scored == {("local", TEACHER_MODEL_NAME), ("remote", "teachers.remote"), ("retry", TEACHER_MODEL_NAME)}
    # episodes of more than one reply were scored too: each reply aligned in its own turn
    assert any(r.get("env/retry/turns", 0) > 1 for r in train), train
    assert "POST /tokenize" in endpoint_log and "POST /v1/completions" in endpoint_log, endpoint_log[-2000:]
    foreign = AutoTokenizer.from_pretrained(bpe_teacher)
    asked = [foreign.decode(p) for path, body in proxy.posts if path == "/v1/completions" for p in body["prompt"]]
    hinted = [(text, re.search(r"reverse: ([a-z]+)", text)) for text in asked if "Hint" in text]
    assert len(hinted) >= 3, asked[:3]  # every step's requests of the remote source (the probe has no answer)
    assert all(HINT.format(answer=found.group(1)[::-1]) in text for text, found in hinted), hinted[:2]
    assert not any("Hint" in s["prompt"] for s in samples)
