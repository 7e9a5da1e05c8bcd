"""converts cache_bytes to GB (1e9) and the per-user size to GiB"""
import math


def max_users(cache_bytes, config, context, dtype_bytes):
    per_token = (2 * config["num_hidden_layers"] * config["num_key_value_heads"]
                 * config["head_dim"] * dtype_bytes)
    return int((cache_bytes / 1e9) // (per_token * context / 2**30))


def max_rate(users, latency_s):
    return users / latency_s
