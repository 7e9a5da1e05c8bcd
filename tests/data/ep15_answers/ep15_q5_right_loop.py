"""right: add users while the next one still fits (<=), int() of the rate's parts"""
import math


def max_users(cache_bytes, config, context, dtype_bytes):
    per_user = context * dtype_bytes * 2
    for key in ("num_hidden_layers", "num_key_value_heads", "head_dim"):
        per_user *= config[key]
    users = cache_bytes // per_user // 2
    while (users + 1) * per_user <= cache_bytes:
        users += 1
    return users


def max_rate(users, latency_s):
    throughput = users / latency_s
    return throughput
