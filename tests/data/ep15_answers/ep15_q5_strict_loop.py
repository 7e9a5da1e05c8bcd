"""a loop that adds a user while the next fits strictly (<): one short when they fit exactly"""
import math


def max_users(cache_bytes, config, context, dtype_bytes):
    per_token = (2 * config["num_hidden_layers"] * config["num_key_value_heads"]
                 * config["head_dim"] * dtype_bytes)
    users = 0
    while (users + 1) * per_token * context < cache_bytes:
        users += 1
    return users


def max_rate(users, latency_s):
    return users / latency_s
