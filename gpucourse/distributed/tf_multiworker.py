"""Data-parallel training across processes with TensorFlow's MultiWorkerMirroredStrategy.

Start one process per worker, each with the same cluster description in TF_CONFIG and its
own task index, e.g. for two workers on one machine:

    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:12345", "127.0.0.1:12346"]},
                "task": {"type": "worker", "index": 0}}' python -m gpucourse.distributed.tf_multiworker --out runs/tf
    (and the same with "index": 1 in a second process)

Every worker builds the same Keras model inside ``strategy.scope()``; the strategy keeps the
copies in sync by all-reducing the gradients. Training is a custom loop with
``strategy.run``: Keras 3's ``model.fit`` fails under MultiWorkerMirroredStrategy, as of
Keras 3.15 ("ValueError: ... PerReplica ... to a Tensor", keras-team/keras#20585;
tests/test_distributed.py runs that failure).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path

from gpucourse.distributed import PORT_CLASH

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for each worker's final weights")
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=128, help="samples per step, all workers together")
    p.add_argument("--lr", type=float, default=0.05)
    return p.parse_args(argv)


@contextlib.contextmanager
def explain_port_clash(tf, config: dict):
    """Turn gRPC's "Could not start gRPC server" into what to do: the worker's port is taken."""
    try:
        yield
    except tf.errors.UnknownError as exc:
        index = config.get("task", {}).get("index", 0)
        address = config.get("cluster", {}).get("worker", ["?"] * (index + 1))[index]
        raise SystemExit(f"error: worker {index} could not listen on {address} ({exc.message}). "
                         f"Most likely {PORT_CLASH}: another program holds that port. Choose new ports "
                         "with free_ports() and start all workers again.") from None


def main(argv=None) -> None:
    args = parse_args(argv)
    from gpucourse.atomic import save_atomic, writable_folder      # torch-free: this worker loads TensorFlow only

    writable_folder(args.out)              # before the workers connect: fail at once, not after training
    from gpucourse.frameworks import import_tensorflow

    tf = import_tensorflow()
    import keras
    import numpy as np

    # >>> 1. the cluster and this worker's place in it   (one process: no TF_CONFIG, no strategy)
    # TF_CONFIG: {"cluster": {"worker": [addresses]}, "task": {"index": i, ...}}
    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    with explain_port_clash(tf, config):     # reads TF_CONFIG, meets the other workers
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    # <<<
    index, workers = config.get("task", {}).get("index", 0), strategy.num_replicas_in_sync
    print(f"[worker {index}] {workers} replicas in sync", flush=True)

    rng = np.random.default_rng(0)        # the same data in every worker
    X = rng.standard_normal((args.samples, 16)).astype("float32")
    w = rng.standard_normal(16).astype("float32")
    y = ((X @ w + 0.5 * rng.standard_normal(args.samples)) > 0).astype("float32")
    # >>> 2. every worker its own shard of each global batch   (one process: the dataset as it is)
    options = tf.data.Options()
    shard = tf.data.experimental.AutoShardPolicy.DATA     # each worker every N-th sample
    options.experimental_distribute.auto_shard_policy = shard
    dataset = (tf.data.Dataset.from_tensor_slices((X, y))
               .batch(args.global_batch, drop_remainder=True).with_options(options))
    dist_dataset = strategy.experimental_distribute_dataset(dataset)
    # <<<

    # >>> 3. build inside the scope: the variables are mirrored   (one process: no scope)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((16,)),
                                  keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9)
        loss_obj = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")
    # <<<

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            per_sample = loss_obj(tf.expand_dims(yb, 1), model(xb, training=True))
            # >>> 4. divide by the GLOBAL batch: summed over replicas, the mean   (one process: the mean)
            loss = tf.nn.compute_average_loss(per_sample,
                                              global_batch_size=args.global_batch)
            # <<<
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))   # all-reduces the gradients
        return loss

    @tf.function
    def train_step(xb, yb):
        # >>> 5. in train_step, a @tf.function: each replica one step, losses summed   (one process: call replica_step itself)
        per_replica = strategy.run(replica_step, args=(xb, yb))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        # <<<
        return loss

    for epoch in range(args.epochs):
        losses = [float(train_step(xb, yb)) for xb, yb in dist_dataset]
        print(f"[worker {index}] epoch {epoch + 1}: mean loss {np.mean(losses):.5f} over {len(losses)} steps",
              flush=True)
    weights = [v.numpy() for v in model.weights]
    save_atomic(lambda f: np.savez(f, *weights), args.out / f"weights-worker{index}.npz")
    print(f"[worker {index}] weight checksum {sum(float(v.astype('float64').sum()) for v in weights):.10f}",
          flush=True)


if __name__ == "__main__":
    main()
