"""head_dim worked out as hidden_size / heads (wrong for Qwen3-like configs)"""
import math


def max_users(cache_bytes, config, context, dtype_bytes):
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    kv_width = config["num_key_value_heads"] * head_dim
    per_user = 2 * kv_width * config["num_hidden_layers"] * context * dtype_bytes
    return math.floor(cache_bytes / per_user)


def max_rate(users, latency_s):
    return float(users) * (1.0 / latency_s)
