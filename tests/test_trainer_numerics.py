"""Trainer numerics at real sizes: logprobs and entropy without an fp32 [batch, seq, vocab] tensor, bf16 compute
over fp32 master weights, activation checkpointing, and a non-finite gradient that skips the step."""

import math
import random
from dataclasses import replace

import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

import prime_rl.trainer.logprobs as logprobs_module
from prime_rl.config import compose_config
from prime_rl.config.schema import LossConfig
from prime_rl.prepare import prepare_student
from prime_rl.protocol.batch import Batch, Sample
from prime_rl.trainer.data import collate
from prime_rl.trainer.distributed import SINGLE
from prime_rl.trainer.logprobs import head_logprobs, token_logprobs
from prime_rl.trainer.loss import entropy_bonus, reference_kl, rl_loss, sft_loss
from prime_rl.trainer.model import head_is_plain, load_model, policy_logprobs
from prime_rl.trainer.reference import Reference
from prime_rl.trainer.setup import Trainer, make_optimizer, trainer_around
from prime_rl.trainer.step import train_step


def reference(logits, ids, temperature):
    """The direct computation: a full fp32 log_softmax."""
    lp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    picked = lp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    entropy = -(lp.exp() * lp).sum(-1)
    return torch.nn.functional.pad(picked, (1, 0)), torch.nn.functional.pad(entropy, (1, 0))


def weighted(logprobs, entropy, weights, uses: str):
    """A loss over the logprobs, the entropy (an entropy bonus alone), or both, with per-position weights."""
    terms = {"logprobs": [logprobs], "entropy": [entropy], "both": [logprobs, entropy]}[uses]
    return sum((t * w).sum() for t, w in zip(terms, weights))


USES = ["logprobs", "entropy", "both"]


@pytest.mark.parametrize("uses", USES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_positions", [1, 3, 100])
def test_chunked_logprobs_entropy_and_gradient_match_the_direct_computation(monkeypatch, dtype, chunk_positions, uses):
    batch, length, vocab = 3, 9, 50
    monkeypatch.setattr(logprobs_module, "CHUNK_BYTES", 4 * batch * vocab * chunk_positions)
    torch.manual_seed(0)
    logits = (torch.randn(batch, length, vocab) * 3).to(dtype).requires_grad_()
    ids, weights = torch.randint(0, vocab, (batch, length)), torch.randn(2, batch, length)
    got, got_entropy, _ = token_logprobs(logits, ids, temperature=0.7)
    weighted(got, got_entropy, weights, uses).backward()
    got_grad, logits.grad = logits.grad, None
    want, want_entropy = reference(logits, ids, 0.7)
    weighted(want, want_entropy, weights, uses).backward()
    assert len(logprobs_module.chunks(batch, length - 1, vocab)) == -(-(length - 1) // chunk_positions)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(got_entropy, want_entropy, rtol=0, atol=1e-5)
    # the entropy's gradient, -p (log p + H), sums terms of both signs: float32 rounding reaches ~2e-5 there
    atol = 1e-5 if uses == "logprobs" else 5e-5
    torch.testing.assert_close(
        got_grad.float(), logits.grad.float(), rtol=1e-2 if dtype == torch.bfloat16 else 0, atol=atol
    )
    assert got_grad.dtype == dtype


@pytest.mark.parametrize("uses", USES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logprobs_from_the_hidden_states_match_the_direct_computation(monkeypatch, dtype, uses):
    """head_logprobs never builds the [B, T, V] logits; values, entropy and both gradients are the direct ones."""
    batch, length, width, vocab = 2, 9, 16, 40
    monkeypatch.setattr(logprobs_module, "CHUNK_BYTES", 4 * batch * vocab * 3)  # chunks of 3 positions
    torch.manual_seed(0)
    hidden = torch.randn(batch, length, width).to(dtype).requires_grad_()
    weight = torch.nn.Parameter(torch.randn(vocab, width))
    ids, weights = torch.randint(0, vocab, (batch, length)), torch.randn(2, batch, length)
    got, got_entropy, _ = head_logprobs(hidden, weight, ids, temperature=0.7)
    weighted(got, got_entropy, weights, uses).backward()
    got_grads = hidden.grad, weight.grad
    hidden.grad = weight.grad = None
    want, want_entropy = reference(hidden @ weight.to(dtype).T, ids, 0.7)
    weighted(want, want_entropy, weights, uses).backward()
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(got_entropy, want_entropy, **tol)
    torch.testing.assert_close(got_grads[0].float(), hidden.grad.float(), **tol)
    torch.testing.assert_close(got_grads[1], weight.grad, **tol)
    assert got_grads[0].dtype == dtype and got_grads[1].dtype == torch.float32


def step_setup(*overrides: str) -> Trainer:
    cfg = compose_config(["trainer.device=cpu", "trainer.optim.warmup_steps=0", *overrides])
    prepare_student(cfg)
    torch.manual_seed(0)  # the same LoRA init in every setup
    model, tokenizer = load_model(cfg, torch.device("cpu"))
    return trainer_around(cfg, model, tokenizer, torch.device("cpu"))


def samples(seed: int, advantage: float | None = None) -> Batch:
    rng = random.Random(seed)
    rows = []
    for _ in range(6):
        completion = [rng.randrange(3, 250) for _ in range(rng.randint(2, 6))]
        adv = rng.uniform(-1, 1) if advantage is None else advantage
        rows.append(Sample([rng.randrange(3, 250) for _ in range(5)], completion, [-5.6] * len(completion), adv))
    return Batch(0, 0, rows, {})


def run_step(trainer: Trainer, batch: Batch, fused_head: bool = False) -> dict:
    """One step from the logits, or from the hidden states and the output layer (`fused_head`)."""
    return train_step(replace(trainer, fused=fused_head), batch)


@pytest.mark.parametrize("overrides", [[], ["model=tiny_qwen3"], ["lora=on"]], ids=["qwen2", "qwen3 tied", "lora"])
def test_a_step_from_the_hidden_states_equals_a_step_from_the_logits(overrides):
    """The one-process path (head_logprobs, the output weight's gradient accumulated in its .grad) takes the same
    two steps as the logits path with autograd's own gradients."""
    logits, hidden = step_setup(*overrides), step_setup(*overrides)
    assert head_is_plain(hidden.model) and hidden.fused
    for seed in (4, 5):
        a, b = run_step(logits, samples(seed)), run_step(hidden, samples(seed), fused_head=True)
        for key in ("loss", "entropy", "grad_norm", "mismatch_kl"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    for p1, p2 in zip(logits.model.parameters(), hidden.model.parameters()):
        torch.testing.assert_close(p1, p2, rtol=0, atol=1e-6)


def test_an_output_layer_with_extras_is_not_taken_as_plain():
    """A soft cap on the logits (Gemma 2) or a bias: the logits must then come from the model itself."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        final_logit_softcapping=5.0,
    )
    assert not head_is_plain(Gemma2ForCausalLM(config))
    model = step_setup().model
    model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.lm_head.out_features))
    assert not head_is_plain(model)


def test_bf16_compute_keeps_fp32_master_weights_and_optimizer_state():
    fp32, bf16 = step_setup(), step_setup("trainer.dtype=bfloat16")
    a, b = run_step(fp32, samples(0)), run_step(bf16, samples(0))
    model, optimizer = bf16.model, bf16.optimizer
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(v.dtype == torch.float32 for s in optimizer.state.values() for v in s.values() if v.dim())
    assert a["loss"] == pytest.approx(b["loss"], rel=0.05, abs=1e-3) and a["grad_norm"] != b["grad_norm"]
    updated = [(p1 - p2).abs().max().item() for p1, p2 in zip(fp32.model.parameters(), model.parameters())]
    assert 0 < max(updated) < 1e-3  # both took a step of ~lr from the same weights, through different roundings


def test_activation_checkpointing_gives_the_same_step():
    plain, checkpointed = step_setup(), step_setup("trainer.activation_checkpointing=true")
    a, b = run_step(plain, samples(1)), run_step(checkpointed, samples(1))
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6) and a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    for p1, p2 in zip(plain.model.parameters(), checkpointed.model.parameters()):
        torch.testing.assert_close(p1, p2, rtol=0, atol=1e-7)


def test_a_non_finite_gradient_skips_the_update_and_is_counted():
    setup = step_setup()
    model = setup.model
    before = [p.detach().clone() for p in model.parameters()]
    skipped = run_step(setup, samples(2, advantage=float("inf")))
    assert skipped["optim/skipped"] == 1.0 and skipped["grad_norm"] != skipped["grad_norm"]  # NaN
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # untouched, not NaN
    taken = run_step(setup, samples(3))
    assert taken["optim/skipped"] == 0.0 and all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before))


@pytest.mark.parametrize(
    ("schedule", "want"),
    [
        ("constant", [1 / 3, 2 / 3, 1, 1, 1, 1]),
        # after 2 warmup steps, a cosine over the 4 steps left: (1 + cos(pi * k / 4)) / 2
        ("cosine", [1 / 3, 2 / 3, 1, (1 + 2**-0.5) / 2, 0.5, (1 - 2**-0.5) / 2]),
    ],
)
def test_the_lr_warms_up_then_follows_the_schedule_to_max_steps(schedule, want):
    cfg = compose_config(["max_steps=6", "trainer.optim.warmup_steps=2", f"trainer.optim.schedule={schedule}"])
    optimizer, scheduler = make_optimizer(cfg, torch.nn.Linear(2, 2))
    lrs = []
    for _ in range(6):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([cfg.trainer.optim.lr * w for w in want])


@pytest.mark.parametrize("mode", ["rl", "sft"])
def test_rl_and_opd_train_without_the_models_dropout(tmp_path, mode):
    """A hub model may ship dropout (GPT-2: resid/embd/attn_pdrop): in rl and opd two forward passes of the training
    model must agree, as vLLM's sampler never drops out; sft keeps the model's regularisation."""
    tokenizer = AutoTokenizer.from_pretrained(prepare_student(compose_config([])))
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.5, attn_pdrop=0.5)
    GPT2LMHeadModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    cfg = compose_config([f"training_mode={mode}", f"model.path={tmp_path}", "trainer.device=cpu"])
    model, _ = load_model(cfg, torch.device("cpu"))
    model.train()
    ids = torch.arange(12)[None]
    with torch.no_grad():
        same = torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)
    assert same == (mode == "rl")


def test_the_entropy_bonus_is_the_trained_tokens_mean_entropy_weighted():
    entropy = torch.tensor([[0.0, 2.0, 1.0, 4.0]], requires_grad=True)
    batch = collate([Sample([7, 8], [9, 10], [-0.1, -0.2])], pad_id=0)  # trains positions 2 and 3
    bonus = entropy_bonus(entropy, batch, LossConfig(entropy_tau=0.1), total_tokens=4)
    assert bonus.item() == pytest.approx(-0.1 * (1.0 + 4.0) / 4)
    bonus.backward()
    assert entropy.grad[0].tolist() == pytest.approx([0.0, 0.0, -0.025, -0.025])


def test_an_entropy_bonus_alone_raises_the_policys_entropy():
    """With every advantage 0 the policy term has no gradient: only the bonus moves the weights, up the entropy."""
    plain, bonus = step_setup(), step_setup("trainer.loss.entropy_tau=1.0", "trainer.optim.lr=1e-2")
    batch = samples(6, advantage=0.0)
    assert run_step(plain, batch)["grad_norm"] == 0.0
    first, second = run_step(bonus, batch), run_step(bonus, batch)
    assert first["grad_norm"] > 0 and second["entropy"] > first["entropy"] + 1e-4, (first, second)


def on_policy(trainer: Trainer, batch: Batch) -> Batch:
    """The batch with mu = the model's own logprobs of each completion token (what vLLM would report)."""
    model, pad = trainer.model, trainer.pad_id
    rows = []
    for s in batch.samples:
        with torch.no_grad():
            logprobs = policy_logprobs(model, collate([s], pad), 1.0, torch.float32, fused_head=False).token
        rows.append(replace(s, inference_logprobs=logprobs[0, len(s.prompt_ids) :].tolist()))
    return replace(batch, samples=rows)


def test_on_policy_a_sequence_level_ratio_takes_the_token_level_step():
    """Every ratio is 1 on-policy, per token and per sample: GSPO's gradient is then the token-level one."""
    token, sequence = step_setup(), step_setup("trainer.loss.ratio_level=sequence")
    batch = on_policy(token, samples(8))
    a, b = run_step(token, batch), run_step(sequence, batch)
    assert a["mismatch_kl"] < 1e-9 and b["clipped/sequence"] == 0.0
    for key in ("loss", "grad_norm"):
        assert a[key] == pytest.approx(b[key], rel=1e-5), key


def test_the_reference_kl_is_k3_with_its_gradient_through_the_policy():
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    reference = torch.tensor([[-1.5, -1.0]])
    kl = reference_kl(logprobs, reference)
    r = [-0.5, 1.0]  # log pi_ref - log pi
    assert kl[0].tolist() == pytest.approx([math.exp(x) - x - 1 for x in r])
    kl.sum().backward()
    assert logprobs.grad[0].tolist() == pytest.approx([1 - math.exp(x) for x in r])


@pytest.mark.parametrize("overrides", [[], ["lora=on"]], ids=["full: a frozen copy", "lora: the adapter off"])
def test_the_reference_is_the_starting_policy_and_stays_it(overrides):
    """Step 1 trains the starting weights: KL 0 to the reference. Step 2 has moved away, and the reference has not:
    its logprobs are still the starting model's."""
    trainer = step_setup("trainer.loss.kl_ref_tau=0.5", "trainer.optim.lr=1e-2", *overrides)
    model, reference = trainer.model, Reference(trainer.cfg, trainer.model, torch.device("cpu"), SINGLE)
    batch = samples(9)
    mb = collate(batch.samples, trainer.pad_id)
    before = reference.logprobs(mb, 1.0, torch.float32, fused_head=False)
    first, second = (train_step(replace(trainer, reference=reference, fused=False), batch) for _ in range(2))
    assert first["kl_ref"] == 0.0 and second["kl_ref"] > 1e-6, (first, second)
    torch.testing.assert_close(reference.logprobs(mb, 1.0, torch.float32, fused_head=False), before)
    moved = policy_logprobs(model, mb, 1.0, torch.float32, fused_head=False)[0].detach()
    assert (moved - before).abs().max() > 1e-4  # the trained model did move


@pytest.mark.parametrize("path", ["logits", "head"])
def test_the_logprobs_of_a_teachers_top_ids_and_their_gradients_match_the_direct_computation(monkeypatch, path):
    """distill=topk: the student's logprobs at k given ids per position come from the same chunks as the token's,
    and a loss over all of them (token, top ids, entropy) has autograd's gradient of a full log_softmax."""
    batch, length, width, vocab, k = 2, 9, 16, 40, 5
    monkeypatch.setattr(logprobs_module, "CHUNK_BYTES", 4 * batch * vocab * 3)  # chunks of 3 positions
    torch.manual_seed(0)
    hidden = torch.randn(batch, length, width, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(vocab, width))
    ids, top_ids = torch.randint(0, vocab, (batch, length)), torch.randint(0, vocab, (batch, length, k))
    top_ids[0, 4, 1] = ids[0, 4]  # the token itself among its top ids: both gradients land on one logit
    weights = torch.randn(batch, length), torch.randn(batch, length), torch.randn(batch, length, k)

    def loss(out):
        return sum((t * w).sum() for t, w in zip(out, weights))

    if path == "head":
        got = head_logprobs(hidden, weight, ids, 0.7, top_ids)
    else:
        got = token_logprobs(hidden @ weight.T, ids, 0.7, top_ids)
    loss(got).backward()
    got_grads = hidden.grad, weight.grad
    hidden.grad = weight.grad = None
    lp = torch.log_softmax((hidden @ weight.T)[:, :-1] / 0.7, dim=-1)
    pad = lambda x: torch.cat([torch.zeros_like(x[:, :1]), x], dim=1)  # noqa: E731
    want = (
        pad(lp.gather(-1, ids[:, 1:, None]).squeeze(-1)),
        pad(-(lp.exp() * lp).sum(-1)),
        pad(lp.gather(-1, top_ids[:, 1:])),
    )
    loss(want).backward()
    tol = {"rtol": 1e-4, "atol": 5e-5}  # float32 rounding of the entropy's terms of both signs (see above)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tol)
    torch.testing.assert_close(got_grads[0], hidden.grad, **tol)
    torch.testing.assert_close(got_grads[1], weight.grad, **tol)


def test_a_step_of_several_modes_trains_each_sample_with_its_own_modes_loss():
    """A mix whose sources set their own modes: the rl samples take the policy loss at the sampling temperature, the
    sft samples the NLL at temperature 1, both over the whole step's tokens; the same samples all taken as rl give
    another step."""
    setup = step_setup("orchestrator.sampling.temperature=0.7")
    cfg, model, pad = setup.cfg, setup.model, setup.pad_id
    rl = [replace(s, mode="rl") for s in samples(10).samples[:3]]
    sft = [replace(s, mode="sft", inference_logprobs=[]) for s in samples(11).samples[:3]]
    tokens = sum(len(s.completion_ids) for s in rl + sft)
    rl_batch, sft_batch = collate(rl, pad), collate(sft, pad)
    rl_out = policy_logprobs(model, rl_batch, 0.7, torch.float32, fused_head=False).token
    sft_out = policy_logprobs(model, sft_batch, 1.0, torch.float32, fused_head=False).token
    want = rl_loss(rl_out, rl_batch, cfg.trainer.loss, tokens)[0] + sft_loss(sft_out, sft_batch, tokens)[0]
    want.backward()
    want_norm = torch.sqrt(sum((p.grad**2).sum() for p in model.parameters() if p.grad is not None)).item()
    model.zero_grad(set_to_none=True)
    as_rl = run_step(step_setup("orchestrator.sampling.temperature=0.7"), Batch(0, 0, [*rl, *rl_like(sft)], {}))
    got = run_step(setup, Batch(0, 0, [rl[0], sft[0], *rl[1:], *sft[1:]], {}))  # the modes interleaved
    assert got["loss"] == pytest.approx(want.item(), rel=1e-5) and got["tokens"] == tokens
    assert got["grad_norm"] == pytest.approx(want_norm, rel=1e-4)
    assert abs(as_rl["loss"] - got["loss"]) > 1e-3, (as_rl, got)


def rl_like(batch: list[Sample]) -> list[Sample]:
    """Teacher-written samples passed off as the student's own (with a sampler logprob per token)."""
    return [replace(s, mode="rl", inference_logprobs=[-5.6] * len(s.completion_ids)) for s in batch]


def test_a_mix_sources_own_adv_tau_weighs_its_samples_alone():
    """task.mix[i].adv_tau: samples of a source with adv_tau 0 give no gradient from their advantages, the same
    samples from a source with the run's adv_tau do; in one step each source's samples train with its own weight."""
    mix = ["task=mix", "task.mix=[{name:reverse,label:a},{name:reverse,label:b,adv_tau:0}]"]
    setups = [step_setup(*mix, "model.warm_start.task=reverse") for _ in range(3)]
    batch = samples(12)
    of = lambda label: [replace(s, mode="rl", source=label) for s in batch.samples]  # noqa: E731
    weighted, unweighted = run_step(setups[0], Batch(0, 0, of("a"), {})), run_step(setups[1], Batch(0, 0, of("b"), {}))
    assert weighted["grad_norm"] > 0 and unweighted["grad_norm"] == 0.0, (weighted, unweighted)
    both = run_step(setups[2], Batch(0, 0, [*of("b"), *of("a")], {}))  # twice the tokens, half of them unweighted
    assert both["loss"] == pytest.approx(weighted["loss"] / 2, rel=1e-5)
    assert both["grad_norm"] == pytest.approx(weighted["grad_norm"] / 2, rel=1e-4)
