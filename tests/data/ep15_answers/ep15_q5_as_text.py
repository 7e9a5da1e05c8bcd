"""returns users as text"""
import math


def max_users(cache_bytes, config, context, dtype_bytes):
    per_token = (2 * config["num_hidden_layers"] * config["num_key_value_heads"]
                 * config["head_dim"] * dtype_bytes)
    return f"{cache_bytes // (per_token * context)} users"


def max_rate(users, latency_s):
    return users / latency_s
