# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeepSpeed's launcher contract, an option of the launch modules (torchrun, slurm_job)."""
from __future__ import annotations


class ModuleDocFragment:
    # The rank wrapper adds it in each rank's process (_node/rankwrap.py deepspeed_contract).
    DOCUMENTATION = r"""
options:
  local_rank_arg:
    description:
      - Give each rank's script V(--local_rank=<N>) (its local rank) right after the script or module, before
        O(args), and the variables C(CROSS_RANK), C(CROSS_SIZE) and C(LOCAL_SIZE), as DeepSpeed's launcher
        (C(deepspeed --hostfile)) does; torchrun passes the local rank only as C(LOCAL_RANK). The rank wrapper
        adds them in each rank's process.
      - For a script written for the DeepSpeed launcher that reads C(args.local_rank).
      - Role C(train) passes C(train_local_rank_arg).
    type: bool
    default: false
"""
