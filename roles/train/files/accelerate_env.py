# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The environment `accelerate launch --config_file CONFIG` gives its ranks, computed by accelerate itself.

Run by train.yml's preflight with the venv's python on the first node (read-only):

    python accelerate_env.py CONFIG NNODES NPROC_PER_NODE [DEEPSPEED_CONFIG]

It parses the arguments the way `accelerate launch` does (launch_command_parser and
_validate_launch_command read the config file), with the topology of train.yml (nodes, processes per
node) instead of the config's num_machines / num_processes / machine_rank / main_process_ip, and
DeepSpeed's `standard` multinode launcher (torchrun launches the ranks, not pdsh). Then it asks
accelerate's own prepare_*_env for the environment and prints, as JSON on stdout, the variables that
accelerate's Accelerator / DeepSpeed plugin read (ACCELERATE_*, FSDP_*, ...). torchrun sets the
rendezvous ones (MASTER_ADDR, RANK, WORLD_SIZE ...): those are left out.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys

# What accelerate launch sets for its ranks that torchrun does not.
KEEP_PREFIXES = ("ACCELERATE_", "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_")
KEEP_NAMES = ("OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME")


def select_env(before, after, chdir, deepspeed_config=""):
    """Variables accelerate added or changed; relative config paths made absolute against chdir."""
    env = {key: value for key, value in after.items()
           if before.get(key) != value and (key.startswith(KEEP_PREFIXES) or key in KEEP_NAMES)}
    path_key = "ACCELERATE_DEEPSPEED_CONFIG_FILE"
    if deepspeed_config and env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        env[path_key] = deepspeed_config
    elif env.get(path_key) and env[path_key] != "None" and not os.path.isabs(env[path_key]):
        env[path_key] = os.path.normpath(os.path.join(chdir, env[path_key]))
    return dict(sorted(env.items()))


def accelerate_env(config, nnodes, nproc):
    """accelerate's own argument parsing and environment preparation (needs accelerate installed)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import launch as accelerate_launch

    argv = ["--config_file", config, "--num_machines", str(nnodes), "--num_processes", str(nnodes * nproc),
            "--machine_rank", "0", "--main_process_ip", "127.0.0.1", "--main_process_port", "0",
            "--deepspeed_multinode_launcher", "standard", "train.py"]
    args = launch_command_parser().parse_args(argv)
    args, defaults, mp_from_config_flag = _validate_launch_command(args)
    if args.use_deepspeed and not args.cpu:
        fields = list(defaults.deepspeed_config.keys()) if defaults else []
        if mp_from_config_flag:
            fields.append("mixed_precision")
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        return accelerate_launch.prepare_deepspeed_cmd_env(args)[1]
    if (args.use_fsdp or args.use_megatron_lm or args.multi_gpu) and not args.cpu:
        return accelerate_launch.prepare_multi_gpu_env(args)
    return accelerate_launch.prepare_simple_launcher_cmd_env(args)[1]


def main(argv):
    if len(argv) not in (4, 5):
        sys.stderr.write(__doc__)
        return 2
    config, nnodes, nproc = argv[1], int(argv[2]), int(argv[3])
    deepspeed_config = argv[4] if len(argv) == 5 else ""
    before = dict(os.environ)
    # accelerate prints warnings; stdout carries the JSON only
    with contextlib.redirect_stdout(sys.stderr):
        try:
            after = accelerate_env(config, nnodes, nproc)
        except ImportError as exc:
            print("accelerate is not installed in this venv (%s); valid: add accelerate to "
                  "train_requirements" % exc, file=sys.stderr)
            return 3
        except (ValueError, TypeError, KeyError, AssertionError, OSError) as exc:
            print("accelerate config %s refused by accelerate: %s: %s" % (config, type(exc).__name__, exc),
                  file=sys.stderr)
            return 4
    print(json.dumps(select_env(before, after, os.getcwd(), deepspeed_config)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
