MISTAKE = 'measured_s set to the prediction (not measured)'
KIND = 'wrong'

def epoch_seconds(n_batches, prep_s, step_s, prefetch):
    if not prefetch:
        return n_batches * (prep_s + step_s)
    return prep_s + step_s + (n_batches - 1) * max(prep_s, step_s)



def answers():
    predicted_s = epoch_seconds(12, 0.03, 0.05, True)
    measured_s = epoch_seconds(12, 0.03, 0.05, True)
    return (epoch_seconds, predicted_s, measured_s)
