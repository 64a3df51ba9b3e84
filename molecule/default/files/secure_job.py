"""A job that stays up: gloo init + all-reduce, then a marker file and a pause.

Used by the launch cluster's verify step molecule/default/verify/launch_secure.yml to look at a running job from inside and outside:
who its ranks run as, who can reach its rendezvous port, where its secrets are.
Prints whether the secrets arrived (never their values).
Arguments: --sleep SECONDS (pause after the all-reduce), --exit CODE (global rank 1 exits with it), --ready-dir DIR
(where each rank writes its marker ready.local<LOCAL_RANK> before the pause: the job's log directory; none without it;
a file `release` there ends the pause early: the verify step writes it once it has looked).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--ready-dir", default="")
    opts = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    print("rank=%d world_size=%d allreduce_sum=%d uid=%d hf_token_set=%s api_key_set=%s" % (
        rank, world, int(total.item()), os.getuid(), bool(os.environ.get("HF_TOKEN")),
        bool(os.environ.get("WANDB_API_KEY"))), flush=True)
    if opts.ready_dir:
        with open(os.path.join(opts.ready_dir, "ready.local%s" % os.environ["LOCAL_RANK"]), "w") as handle:
            handle.write("%d\n" % os.getpid())
    release = os.path.join(opts.ready_dir, "release") if opts.ready_dir else None
    deadline = time.monotonic() + opts.sleep
    while time.monotonic() < deadline and not (release and os.path.exists(release)):
        time.sleep(0.2)
    if opts.exit and rank == 1:
        raise SystemExit(opts.exit)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
