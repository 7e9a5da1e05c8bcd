"""A Slurm batch script that runs ddp_train.py on two nodes with four GPUs each (episode 9).

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
