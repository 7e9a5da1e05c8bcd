"""rounds the rate to the nearest whole request per second"""
import math


def max_users(cache_bytes, config, context, dtype_bytes):
    per_token = (2 * config["num_hidden_layers"] * config["num_key_value_heads"]
                 * config["head_dim"] * dtype_bytes)
    return cache_bytes // (per_token * context)


def max_rate(users, latency_s):
    return round(users / latency_s)
