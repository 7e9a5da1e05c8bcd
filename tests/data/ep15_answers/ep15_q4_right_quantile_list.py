"""right: np.quantile(…, 0.99), a list returned, one-token requests good when TTFT is"""
import math

import numpy as np


def slo_report(records, slo_ttft, slo_tpot, duration):
    ttfts, tpots, good = [], [], 0
    for r in records:
        if r["ok"] is False:
            continue
        t = r["times"]
        ttfts.append(t[0] - r["sent"])
        if len(t) == 1:
            good += t[0] - r["sent"] <= slo_ttft
            continue
        tpots.append((t[-1] - t[0]) / (len(t) - 1))
        good += ttfts[-1] <= slo_ttft and tpots[-1] <= slo_tpot
    return [np.quantile(ttfts, 0.99), np.quantile(tpots, 0.99), good / duration]
