"""sizes the cache by hidden_size"""
import math


def max_users(cache_bytes, config, context, dtype_bytes):
    per_token = (2 * config["num_hidden_layers"] * config["hidden_size"] * dtype_bytes)
    return cache_bytes // (per_token * context)


def max_rate(users, latency_s):
    return users / latency_s
