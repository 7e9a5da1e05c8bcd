"""right: pops the first token time off each record (mutates the input)"""
import math

import numpy as np


def slo_report(records, slo_ttft, slo_tpot, duration):
    ttfts, tpots, good = [], [], 0
    for r in records:
        if not r["ok"]:
            continue
        first = r["times"].pop(0)
        ttft = first - r["sent"]
        rest = r["times"]
        tpot = (rest[-1] - first) / len(rest) if rest else 0.0
        ttfts.append(ttft)
        if rest:
            tpots.append(tpot)
        good += (ttft <= slo_ttft) and (tpot <= slo_tpot)
    return np.percentile(ttfts, 99), np.percentile(tpots, 99), good / duration
