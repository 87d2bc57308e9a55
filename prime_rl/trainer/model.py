"""The trained model: transformers on CPU or CUDA, optionally wrapped in a peft LoRA adapter."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config.schema import Config
from prime_rl.models import student_dir


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_model(cfg: Config, device: torch.device):
    path = student_dir(cfg)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    if cfg.trainer.lora.enabled:
        from peft import LoraConfig, get_peft_model

        lora = cfg.trainer.lora
        model = get_peft_model(
            model,
            LoraConfig(
                r=lora.rank,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
            ),
        )
    return model, AutoTokenizer.from_pretrained(path)
