"""right: divmod, config copied and popped"""
import math


def max_users(cache_bytes, config, context, dtype_bytes):
    c = dict(config)
    per_token = 2 * dtype_bytes * c.pop("num_hidden_layers") * c.pop("num_key_value_heads") * c.pop("head_dim")
    users, _ = divmod(cache_bytes, per_token * context)
    return users


def max_rate(users, latency_s):
    return users / latency_s
