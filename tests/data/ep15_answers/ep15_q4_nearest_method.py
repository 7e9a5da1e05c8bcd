"""np.percentile(..., method='nearest')"""
import math

import numpy as np


def slo_report(records, slo_ttft, slo_tpot, duration):
    ttfts, tpots, good = [], [], 0
    for r in records:
        if not r["ok"]:
            continue
        times = r["times"]
        ttft = times[0] - r["sent"]
        tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
        ttfts.append(ttft)
        if len(times) > 1:
            tpots.append(tpot)
        good += ttft <= slo_ttft and tpot <= slo_tpot
    return np.percentile(ttfts, 99, method='nearest'), np.percentile(tpots, 99, method='nearest'), good / duration
