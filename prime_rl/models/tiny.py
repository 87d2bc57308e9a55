"""The built-in tiny models, randomly initialised from a seed: Qwen2 (the default, ~378 k parameters, untied) or
Qwen3 (q/k norm), with or without tied embeddings."""

from pathlib import Path

import torch
from transformers import (
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from prime_rl.config.schema import TinyArchitecture, TinyModelConfig

ARCHITECTURES = {
    TinyArchitecture.qwen2: (Qwen2Config, Qwen2ForCausalLM),
    TinyArchitecture.qwen3: (Qwen3Config, Qwen3ForCausalLM),
}


def build_tiny_model(tiny: TinyModelConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    if len(tokenizer) > tiny.vocab_size:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than tiny.vocab_size={tiny.vocab_size}")
    bos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    # Generation stops at the end of a turn, and at the end of a document (as Qwen's generation configs say).
    eos = list(dict.fromkeys([tokenizer.eos_token_id, bos]))
    config_cls, model_cls = ARCHITECTURES[tiny.architecture]
    config = config_cls(
        vocab_size=tiny.vocab_size,
        hidden_size=tiny.hidden_size,
        intermediate_size=tiny.intermediate_size,
        num_hidden_layers=tiny.num_layers,
        num_attention_heads=tiny.num_heads,
        num_key_value_heads=tiny.num_kv_heads,
        max_position_embeddings=512,
        initializer_range=0.02,  # the standard init; a wide random init does not train
        head_dim=tiny.hidden_size // tiny.num_heads,
        tie_word_embeddings=tiny.tie_embeddings,
        bos_token_id=bos,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(tiny.init_seed)
    model = model_cls(config)
    model.generation_config = GenerationConfig(
        bos_token_id=bos, eos_token_id=eos if len(eos) > 1 else eos[0], pad_token_id=tokenizer.pad_token_id
    )
    return model


def save_model(model, tokenizer: PreTrainedTokenizerBase, out_dir: Path) -> None:
    """Weights (safetensors), config, generation config (eos) and tokenizer, loadable by vLLM and transformers."""
    model.save_pretrained(out_dir)
    # The chat template inside tokenizer_config.json, where every transformers version and vLLM look for it.
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)
