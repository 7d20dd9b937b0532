"""Engine integrations: kvbm as vLLM's secondary KV tier (kvbm.integrations.vllm) and as
SGLang's HiCache storage backend (kvbm.integrations.sglang). Each imports without its engine."""
