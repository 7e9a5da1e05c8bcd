"""TPOT = (last token - sent) / tokens (end-to-end per token)"""
import math

import numpy as np


def slo_report(records, slo_ttft, slo_tpot, duration):
    ttfts, tpots, good = [], [], 0
    for r in records:
        if not r["ok"]:
            continue
        times = r["times"]
        ttft = times[0] - r["sent"]
        tpot = (times[-1] - r["sent"]) / len(times)
        ttfts.append(ttft)
        tpots.append(tpot)
        good += ttft <= slo_ttft and tpot <= slo_tpot
    return np.percentile(ttfts, 99), np.percentile(tpots, 99), good / duration
