"""The model the engine tests serve: a 2-layer llama with no weights, of which the engines read
only config.json (shared by vllm_util.py and sglang_util.py)."""

import json
import os

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}


def write_model(directory, **overrides) -> str:
    """A model directory holding only config.json: the tiny llama with `overrides`."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({**TINY_LLAMA, **overrides}, f)
    return str(directory)
