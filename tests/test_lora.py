"""LoRA: the trainer changes only adapter weights, and vLLM serving the exported adapter matches transformers + peft."""

import asyncio
import copy
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from prime_rl.config import compose_config
from prime_rl.inference.client import InferenceClient, Sampling
from prime_rl.models.chat import answer_ids, prompt_ids
from prime_rl.prepare import prepare_student
from prime_rl.protocol.batch import Batch, Sample
from prime_rl.protocol.run_dir import RunDir
from prime_rl.tasks import load_task
from prime_rl.trainer.model import load_model
from prime_rl.trainer.setup import trainer_around
from prime_rl.trainer.step import train_step
from prime_rl.trainer.weights import export_merged, export_weights
from tests.vllm_server import serve

GREEDY = Sampling(temperature=0.0, top_p=1.0, max_tokens=16)


@pytest.fixture(
    scope="module",
    params=[["lora=on", "trainer.lora.rank=12"], ["model=tiny_qwen3", "lora=embeddings"]],
    ids=["on", "embeddings"],
)
def trained(tmp_path_factory, request):
    """A LoRA student after a few aggressive NLL steps on the sort task (so its outputs surely change); `embeddings`
    also adapts the input embedding and the (tied) output layer, which vLLM serves through its own LoRA layers.
    `on` has a rank vLLM does not list (12): its server takes the next it does (16) and serves the adapter as is."""
    torch.set_num_threads(1)
    cfg = compose_config([*request.param, "trainer.optim.lr=1e-2", "trainer.optim.warmup_steps=0"])
    cfg = replace(cfg, training_mode="sft")  # NLL, as the trainer trains in sft mode
    prepare_student(cfg)
    model, tok = load_model(cfg, torch.device("cpu"))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = trainer_around(cfg, model, tok, torch.device("cpu"))
    examples = load_task(replace(cfg.task, name="sort")).train[:32]
    samples = [Sample(prompt_ids(tok, e.prompt), answer_ids(tok, e.prompt, e.answer), []) for e in examples]
    for step in range(5):
        train_step(trainer, Batch(step, step, samples))
    run_dir = RunDir(tmp_path_factory.mktemp("lora-run"))
    export_weights(model, tok, run_dir, 5)
    return cfg, model, tok, before, run_dir


@pytest.mark.slow
def test_only_adapter_weights_change(trained):
    cfg, model, _, before, _ = trained
    changed = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed and all("lora_" in n for n in changed)
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in changed}
    assert adapted == set(cfg.trainer.lora.target_modules)  # every targeted module learned, the output layer too
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {n for n in before if "lora_" in n}


@pytest.mark.slow
def test_the_merged_export_equals_the_adapter(trained, tmp_path):
    """End of training: the adapter folded into the base weights, reloaded without peft, gives peft's logits (a tied
    output layer with an adapter of its own is untied first)."""
    _, model, tok, _, _ = trained
    ids = torch.tensor([prompt_ids(tok, "reverse: hello")])
    model.eval()
    with torch.no_grad():
        want = model(input_ids=ids).logits
        export_merged(copy.deepcopy(model), tok, tmp_path / "merged")
        got = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.vllm
def test_vllm_serves_the_exported_adapter_like_peft(trained, tmp_path):
    cfg, model, tok, _, run_dir = trained
    prompts = [f"reverse: {w}" for w in ["abcdef", "xyz", "hello", "qwerty", "mnop", "kite"]]
    ids = [prompt_ids(tok, p) for p in prompts]
    model.eval()
    with torch.no_grad():
        peft_out = [
            model.generate(input_ids=torch.tensor([i]), max_new_tokens=16, do_sample=False)[0, len(i) :].tolist()
            for i in ids
        ]
        with model.disable_adapter():
            base_out = [
                model.generate(input_ids=torch.tensor([i]), max_new_tokens=16, do_sample=False)[0, len(i) :].tolist()
                for i in ids
            ]
    assert peft_out != base_out  # the adapter matters, so matching it below means something

    async def served(url):
        client = InferenceClient(f"{url}/v1", max_retries=1)
        await client.load_lora(cfg.trainer.lora.name, str(run_dir.weights(5)))
        groups = await client.complete(cfg.trainer.lora.name, ids, 1, GREEDY)
        await client.close()
        return [g[0].token_ids for g in groups]

    with serve(prepare_student(cfg), tmp_path, lora_rank=cfg.trainer.lora.rank) as url:
        assert asyncio.run(served(url)) == peft_out
