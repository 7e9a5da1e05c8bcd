"""Slurm batch scripts: ddp_train.py on two nodes with four GPUs each (episode 9), and a run
that saves and comes back when its wall time nears or it is pre-empted (episode 11).

One ``torchrun`` per node (``srun`` starts it on every node of the job); the first node's host
name is the rendezvous endpoint. Adapt the ``#SBATCH`` lines and the environment set-up to
your cluster's documentation. tests/test_distributed.py checks its shell syntax and runs it
dry, with stand-ins for srun, module and scontrol.
"""

from __future__ import annotations

from pathlib import Path

SBATCH = r"""#!/bin/bash
#SBATCH --job-name=ddp-ep09
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1          # one torchrun per node; it starts the per-GPU processes
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=00:30:00

module load python                   # or: source /path/to/venv/bin/activate
set -euo pipefail
export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"   # srun did not inherit --cpus-per-task in Slurm 22.05-23.02
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$((20000 + SLURM_JOB_ID % 20000))             # a port per job: no clash on a shared node

srun torchrun \
    --nnodes="$SLURM_JOB_NUM_NODES" \
    --nproc-per-node="$SLURM_GPUS_ON_NODE" \
    --rdzv-backend=c10d \
    --rdzv-endpoint="$head_node:$port" \
    --rdzv-id="$SLURM_JOB_ID" \
    -m gpucourse.distributed.ddp_train --out "$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_ID" --epochs 20
"""


def write(path: str | Path) -> Path:
    """Write the batch script to ``path`` (submit it with ``sbatch PATH``); returns the path."""
    path = Path(path)
    path.write_text(SBATCH)
    return path


#: Episode 11's batch script: on SIGUSR1 (asked for 120 s before the wall time) or SIGTERM
#: (pre-emption: Slurm sends SIGCONT and SIGTERM, then SIGKILL after the partition's
#: GraceTime), the run saves and exits 128 + the signal (138 or 143), and the job is requeued.
#: tests/test_survive_helpers.py runs it with stand-ins for python and scontrol.
REQUEUE = r"""#!/bin/bash
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@120      # SIGUSR1 to this batch script 120 s before the wall time
#SBATCH --requeue                # the job may be put back in the queue
#SBATCH --open-mode=append       # a requeued job appends to its log

python -m gpucourse.children.survive_train --out "$SCRATCH/run-1" &     # resumes if a checkpoint is there
child=$!
asked=
ask() { echo "SIG$1: asking the run to save"; asked=1; kill -"$1" "$child"; }
trap 'ask USR1' USR1             # the wall time is near
trap 'ask TERM' TERM             # pre-empted: Slurm sends SIGTERM, then SIGKILL after GraceTime
wait "$child"; status=$?
if [ -n "$asked" ]; then wait "$child"; status=$?; fi   # the trap cut the wait short: get the run's own code
if [ "$status" -eq 138 ] || [ "$status" -eq 143 ]; then  # stopped by USR1 or TERM, and saved
    scontrol requeue "$SLURM_JOB_ID"                      # come back, and resume
fi
exit "$status"
"""


def write_requeue(path: str | Path) -> Path:
    """Write episode 11's batch script (:data:`REQUEUE`) to ``path``; returns the path."""
    path = Path(path)
    path.write_text(REQUEUE)
    return path
