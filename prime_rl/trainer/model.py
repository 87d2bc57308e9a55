"""The trained model: transformers on CPU or CUDA, optionally wrapped in a peft LoRA adapter."""

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from prime_rl.config.modes import uses
from prime_rl.config.schema import Config
from prime_rl.models import student_dir
from prime_rl.trainer.logprobs import Logprobs, head_logprobs, token_logprobs


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def compute_dtype(cfg: Config, device: torch.device) -> torch.dtype:
    """What the forward and backward passes compute in (trainer.dtype); the weights stay float32 (master weights)."""
    name = cfg.trainer.dtype
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


def model_config(cfg: Config):
    """The student's config as the trainer builds it: without dropout where it trains the sampled policy (in a mix
    of modes, where any source does: one model trains every sample)."""
    config = AutoConfig.from_pretrained(student_dir(cfg))
    if uses(cfg, lambda m: m.trains_sampled_policy):
        without_dropout(config)
    return config


def load_model(cfg: Config, device: torch.device):
    """The model in float32: the master weights the optimizer updates, whatever the compute dtype."""
    path = student_dir(cfg)
    model = AutoModelForCausalLM.from_pretrained(path, config=model_config(cfg), dtype=torch.float32).to(device)
    checkpoint_activations(cfg, model)
    if cfg.trainer.lora.enabled:
        from peft import LoraConfig, get_peft_model

        lora, targets = cfg.trainer.lora, list(cfg.trainer.lora.target_modules)
        adapter = LoraConfig(
            r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets, task_type="CAUSAL_LM"
        )
        model = get_peft_model(model, adapter)
    return model, AutoTokenizer.from_pretrained(path)


def checkpoint_activations(cfg: Config, model) -> None:
    """trainer.activation_checkpointing: each decoder layer recomputed in the backward pass."""
    if cfg.trainer.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def without_dropout(config) -> None:
    """Every dropout probability of a model's config (attention_dropout, resid_pdrop, …) set to 0: in rl and opd
    the trainer must compute the policy vLLM sampled from, and vLLM never drops out."""
    for part in (config, config.get_text_config()):
        for name, value in vars(part).items():
            if isinstance(value, float) and ("dropout" in name or "pdrop" in name):
                setattr(part, name, 0.0)


def decoder_and_head(model) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(the model body returning the final hidden states, the output layer), through a peft wrapper too."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder(), base.get_output_embeddings()


@torch.no_grad()
def head_is_plain(model) -> bool:
    """Whether the logits are exactly `final hidden states @ output weight.T` (no bias, scale or soft cap, which
    some architectures add), checked on a short input: then the trainer never needs the logits whole."""
    decoder, head = decoder_and_head(model)
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return False
    training = model.training
    model.eval()  # no dropout: both sides must see the same activations
    ids = torch.arange(8, device=head.weight.device)[None] % head.weight.shape[0]
    logits = model(input_ids=ids).logits
    plain = torch.allclose(decoder(input_ids=ids).last_hidden_state @ head.weight.T, logits, rtol=1e-4, atol=1e-5)
    model.train(training)
    return plain


def policy_logprobs(model, mb, temperature: float, compute: torch.dtype, fused_head: bool) -> Logprobs:
    """The micro-batch's logprobs under the model at `temperature` (with the teacher's top-k ids where it has them),
    computed in `compute`. One process autocasts from the float32 weights (FSDP casts them itself, by its policy).
    With a plain output layer the logits are never built whole (head_logprobs); otherwise they come from the model
    (token_logprobs)."""
    autocast = torch.autocast(mb.input_ids.device.type, dtype=compute, enabled=compute != torch.float32)
    if fused_head:
        decoder, head = decoder_and_head(model)
        with autocast:
            hidden = decoder(**mb.model_inputs()).last_hidden_state
        return head_logprobs(hidden.to(compute), head.weight, mb.input_ids, temperature, mb.teacher_top_ids)
    with autocast:
        logits = model(**mb.model_inputs()).logits
    return token_logprobs(logits, mb.input_ids, temperature, mb.teacher_top_ids)
