# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Example job that uses Hugging Face accelerate, unchanged, under train.yml (torchrun launches the ranks).

    ansible-playbook train.yml -i hostfile \\
      -e train_code_src=roles/train/files/ \\
      -e train_script=/opt/multinode-training/code/accelerate_train.py \\
      -e train_accelerate_config=roles/train/files/accelerate_cpu.yaml \\
      -e '{"train_requirements": ["accelerate"]}'

Every rank gathers (rank, local rank, host, world size, distributed type) of every rank and prints the
whole gathered world and its sha256: identical lines on all ranks prove they all joined one world.
Then a few steps of a tiny model through accelerator.prepare / accelerator.backward.
"""
import argparse
import hashlib
import json
import socket

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    accelerator = Accelerator()
    me = {"rank": accelerator.process_index, "local_rank": accelerator.local_process_index,
          "host": socket.gethostname(), "world_size": accelerator.num_processes,
          "distributed_type": str(accelerator.distributed_type.value),
          "mixed_precision": str(accelerator.mixed_precision)}
    world = sorted(gather_object([me]), key=lambda item: item["rank"])
    world_json = json.dumps(world, sort_keys=True, separators=(",", ":"))
    world_sha = hashlib.sha256(world_json.encode()).hexdigest()[:16]

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    loss = torch.tensor(0.0)
    for step, (x, y) in enumerate(loader, start=1):
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if step >= args.steps:
            break
    rank_sum = accelerator.reduce(torch.tensor(float(accelerator.process_index)), reduction="sum")
    print("accelerate rank=%d world_size=%d distributed_type=%s hosts=%s rank_sum=%d world_sha=%s "
          "step=%d loss=%.4f world=%s" % (
              accelerator.process_index, accelerator.num_processes, me["distributed_type"],
              ",".join(sorted({item["host"] for item in world})), int(rank_sum.item()), world_sha,
              step, loss.item(), world_json), flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
