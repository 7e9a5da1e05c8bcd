MISTAKE = "the solution's numbers without the pipeline it timed (the check needs it: a time cannot show prefetching)"
KIND = 'wrong'

def epoch_seconds(n_batches, prep_s, step_s, prefetch):
    if not prefetch:
        return n_batches * (prep_s + step_s)
    return prep_s + step_s + (n_batches - 1) * max(prep_s, step_s)


import time
def _pipeline(prefetched):
    PREP_S, STEP_S = 0.03, 0.05
    def slow_preprocess(i):
        time.sleep(PREP_S)
        return i
    import keras
    if keras.backend.backend() == "tensorflow":
        from gpucourse.checks.ep04 import q3_slow_pipeline
        ds = q3_slow_pipeline()
        ds = ds.prefetch(1) if prefetched else ds
    else:
        import torch
        class SlowBatches(torch.utils.data.Dataset):
            def __len__(self):
                return 12
            def __getitem__(self, i):
                return slow_preprocess(i)
        ds = (torch.utils.data.DataLoader(SlowBatches(), batch_size=None, num_workers=1, prefetch_factor=1)
              if prefetched else torch.utils.data.DataLoader(SlowBatches(), batch_size=None))
    start = time.perf_counter()
    for batch in ds:
        time.sleep(STEP_S)
    return time.perf_counter() - start


def answers():
    predicted_s = epoch_seconds(12, 0.03, 0.05, True)
    measured_s = _pipeline(True)
    return (epoch_seconds, predicted_s, measured_s)
