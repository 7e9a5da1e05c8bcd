"""right: TPOT as the mean of the inter-token gaps (np.diff), numpy arrays throughout"""
import math

import numpy as np


def slo_report(records, slo_ttft, slo_tpot, duration):
    done = [r for r in records if r["ok"]]
    ttft = np.array([r["times"][0] - r["sent"] for r in done])
    tpot = np.array([np.diff(r["times"]).mean() if len(r["times"]) > 1 else 0.0 for r in done])
    multi = np.array([len(r["times"]) > 1 for r in done])
    good = np.sum((ttft <= slo_ttft) & (tpot <= slo_tpot))
    return float(np.percentile(ttft, 99)), float(np.percentile(tpot[multi], 99)), good / duration
