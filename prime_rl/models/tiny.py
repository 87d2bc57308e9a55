"""The built-in tiny Qwen2 model (~378 k parameters), randomly initialised from a seed."""

from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from prime_rl.config.schema import TinyModelConfig


def build_tiny_model(tiny: TinyModelConfig, tokenizer: PreTrainedTokenizerBase) -> Qwen2ForCausalLM:
    if len(tokenizer) > tiny.vocab_size:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than tiny.vocab_size={tiny.vocab_size}")
    bos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=tiny.vocab_size,
        hidden_size=tiny.hidden_size,
        intermediate_size=tiny.intermediate_size,
        num_hidden_layers=tiny.num_layers,
        num_attention_heads=tiny.num_heads,
        num_key_value_heads=tiny.num_kv_heads,
        max_position_embeddings=512,
        initializer_range=0.02,  # the standard init; a wide random init does not train
        tie_word_embeddings=False,  # vLLM's weight reload leaves a tied output layer on the old weights
        bos_token_id=bos,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(tiny.init_seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=bos, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


def save_model(model, tokenizer: PreTrainedTokenizerBase, out_dir: Path) -> None:
    """Weights (safetensors), config, generation config (eos) and tokenizer, loadable by vLLM and transformers."""
    model.save_pretrained(out_dir)
    # The chat template inside tokenizer_config.json, where every transformers version and vLLM look for it.
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)
