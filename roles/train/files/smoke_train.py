# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Smoke job bundled with multinode.training: proves a launch end to end.

1. torch.distributed all-reduce of the ranks (gloo on CPU, nccl on GPU): every
   rank prints the world size and the sum, which must be 0+1+...+(world_size-1).
2. A tiny DeepSpeed ZeRO training loop with the optimizer offloaded to the CPU,
   i.e. DeepSpeedCPUAdam from the *prebuilt* cpu_adam op. TORCH_EXTENSIONS_DIR
   points at an empty directory and must still be empty afterwards: no JIT build.

Failure injection for tests: --fail-rank R --fail-step S raises on rank R at
step S (the error lands in torchrun's per-rank error.json through @record;
--no-record leaves it to the rank's stderr, as most scripts do; --fail-assert
TEXT raises AssertionError(TEXT)). --hang-others: the other ranks ignore
SIGTERM and block after the all-reduce, as NCCL ranks in a collective with a
dead peer do. --step-seconds N: a long job (N seconds per step). --linger-rank R
--linger-seconds S: rank R works S seconds more after the last collective (as a
rank writing the final checkpoint while the others have exited). --hold-file PATH
--hold-seconds S: after the last step every rank waits until PATH exists (at most
S seconds, then it fails): a job that ends only once its observer has seen it run.

A GPU job's shape without a GPU (--skip-deepspeed --device-seconds S): every step the rank's "device" works
S seconds, then the ranks all-reduce. --device-wait spin (the default) waits as CUDA's default synchronisation
does: spinning to the device's deadline, then spinning until the all-reduce is done; --spin-thread keeps a
second thread of every rank busy in native code (matrix products) throughout, as NCCL's proxy threads are;
--device-wait sleep waits as blocking synchronisation does. --slow-ranks R,R --slow-factor F: those ranks' device takes F times as long.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--zero-stage", type=int, default=2, choices=(1, 2))
    parser.add_argument("--optimizer", default="cpu_adam", choices=("cpu_adam", "fused_adam"),
                        help="cpu_adam: DeepSpeedCPUAdam with the optimizer offloaded to the CPU; fused_adam: "
                        "the config's Adam, which DeepSpeed runs as FusedAdam on a GPU (the prebuilt op)")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=1)
    parser.add_argument("--skip-deepspeed", action="store_true")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--fail-assert", default="")
    parser.add_argument("--hang-others", action="store_true")
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--hang-rank", type=int, default=-1,
                        help="with --skip-deepspeed --step-seconds: every step all-reduces, and this rank stops "
                             "entering them at --hang-step (it sleeps; the others wait in the all-reduce)")
    parser.add_argument("--hang-step", type=int, default=3)
    parser.add_argument("--device-seconds", type=float, default=0.0)
    parser.add_argument("--device-wait", default="spin", choices=("spin", "sleep"))
    parser.add_argument("--spin-thread", action="store_true")
    parser.add_argument("--slow-ranks", default="", help="comma-separated global ranks")
    parser.add_argument("--slow-factor", type=float, default=2.0)
    parser.add_argument("--linger-rank", type=int, default=-1)
    parser.add_argument("--linger-seconds", type=float, default=0.0)
    parser.add_argument("--hold-file", default="")
    parser.add_argument("--hold-seconds", type=float, default=600.0)
    # by default the directory the collection gives the job (train_checkpoint_dir)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("MULTINODE_TRAINING_CHECKPOINT_DIR", ""))
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=0.0,
                        help="end the DeepSpeed steps at the first step that starts this long after the first "
                             "(rank 0's clock, all-reduced each step so that every rank ends at the same step; "
                             "--steps stays the most): a job of about this long whatever the nodes' speed")
    parser.add_argument("--stamp", action="store_true",
                        help="every step line ends with the time it was printed")
    parser.add_argument("--echo-args", action="store_true",
                        help="print the arguments received (each repr'd) and exit after the all-reduce")
    parser.add_argument("--local_rank", type=int, default=-1,
                        help="as DeepSpeed's launcher passes it (train_local_rank_arg: true): checked against "
                             "LOCAL_RANK and printed with CROSS_RANK, CROSS_SIZE and LOCAL_SIZE")
    parser.add_argument("extra", nargs="*", help="free arguments, only echoed")
    return parser.parse_args(argv)


def main(argv=None):
    from torch.distributed.elastic.multiprocessing.errors import record

    args = parse_args(argv)
    if args.no_record:
        return _run(args)

    @record
    def run():
        return _run(args)

    return run()


def _fail(args, rank, step):
    if args.fail_assert:
        raise AssertionError(args.fail_assert)
    raise RuntimeError("injected failure on rank %d at step %d" % (rank, step))


def _steps(args, rank):
    """--step-seconds: a long job without DeepSpeed; --hang-others: the other ranks block for good;
    --hang-rank: an all-reduce every step, which that rank stops entering (a hang); --device-seconds: a
    GPU-shaped step (the device's time, then an all-reduce); --checkpoint-every: rank 0 writes a checkpoint."""
    import signal
    import time

    if args.hang_others and args.fail_rank >= 0 and args.fail_rank != rank:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("smoke: rank=%d blocking (SIGTERM ignored)" % rank, flush=True)
        while True:
            time.sleep(1)
    device = args.device_seconds
    if str(rank) in [r.strip() for r in args.slow_ranks.split(",")]:
        device *= args.slow_factor
    stop_spinner = _spinner() if args.spin_thread else None
    try:
        _step_loop(args, rank, device)
    finally:
        if stop_spinner:
            stop_spinner()


def _step_loop(args, rank, device):
    import time

    import torch
    import torch.distributed as dist

    for step in range(1, args.steps + 1):
        if args.fail_rank == rank and step == args.fail_step:
            print("smoke: rank=%d failing at step %d time=%.3f" % (rank, step, time.time()), flush=True)
            _fail(args, rank, step)
        if args.hang_rank == rank and step == args.hang_step:
            print("smoke: rank=%d hanging at step %d time=%.3f" % (rank, step, time.time()), flush=True)
            while True:
                time.sleep(3600)
        time.sleep(args.step_seconds)
        if device:
            _device_wait(device, args.device_wait)
        if device and args.device_wait == "spin":
            # as a rank synchronising with its GPU under CUDA's default: the CPU spins until the collective is done
            work = dist.all_reduce(torch.ones(1), async_op=True)
            while not work.is_completed():
                pass
            work.wait()
        elif args.hang_rank >= 0 or device:
            dist.all_reduce(torch.ones(1))
        print("smoke: rank=%d step=%d%s" % (rank, step, " time=%.3f" % time.time() if args.stamp else ""),
              flush=True)
        if rank == 0 and args.checkpoint_dir and args.checkpoint_every and step % args.checkpoint_every == 0:
            _save_step(args.checkpoint_dir, step)
            print("smoke: rank=%d checkpoint step=%d" % (rank, step), flush=True)


def _save_step(directory, step):
    """A checkpoint of the step loop (no model): the step, written whole or not at all, as training
    frameworks write theirs (a new file in the checkpoint directory)."""
    import os

    path = os.path.join(directory, "step%d" % step)
    with open(path + ".tmp", "w") as handle:
        handle.write("%d\n" % step)
    os.replace(path + ".tmp", path)


def _device_wait(seconds, how):
    """The device's time of one step: spun to a deadline (CUDA's default sync) or slept (blocking sync)."""
    import time

    deadline = time.monotonic() + seconds
    if how == "sleep":
        time.sleep(seconds)
        return
    while time.monotonic() < deadline:
        pass


def _spinner():
    """A thread that stays busy in native code (as NCCL's proxy threads do) until the returned stop() is
    called (a thread still inside torch as the interpreter exits aborts the process)."""
    import threading

    import torch

    done = threading.Event()

    def spin():
        a = torch.rand(96, 96)
        while not done.is_set():
            a = torch.mm(a, a).clamp_(-1, 1)

    thread = threading.Thread(target=spin, name="smoke-spinner", daemon=True)
    thread.start()

    def stop():
        done.set()
        thread.join()
    return stop


def _run(args):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else torch.device("cpu")
    tensor = torch.tensor([float(rank)], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    total = int(tensor.item())
    expected = world_size * (world_size - 1) // 2
    print("smoke: rank=%d world_size=%d allreduce_sum=%d expected=%d host=%s cwd=%s"
          % (rank, world_size, total, expected, os.uname()[1], os.getcwd()), flush=True)
    if args.local_rank != -1:
        # What a script written for `deepspeed` reads: its --local_rank, and the launcher's per-node variables.
        print("smoke: rank=%d --local_rank=%d LOCAL_RANK=%s CROSS_RANK=%s CROSS_SIZE=%s LOCAL_SIZE=%s"
              % (rank, args.local_rank, os.environ.get("LOCAL_RANK"), os.environ.get("CROSS_RANK"),
                 os.environ.get("CROSS_SIZE"), os.environ.get("LOCAL_SIZE")), flush=True)
        if str(args.local_rank) != os.environ.get("LOCAL_RANK"):
            raise RuntimeError("--local_rank=%d but LOCAL_RANK=%s" % (args.local_rank, os.environ.get("LOCAL_RANK")))
    if args.echo_args:
        print("smoke: args=%r" % (args.extra,), flush=True)
    if total != expected:
        raise RuntimeError("all-reduce of ranks gave %d, expected %d" % (total, expected))

    if args.skip_deepspeed and (args.step_seconds or args.hang_others or args.device_seconds):
        _steps(args, rank)
    elif not args.skip_deepspeed:
        train(args, rank, world_size, device)
    elif args.fail_rank == rank:
        dist.barrier()
        _fail(args, rank, args.fail_step)
    if args.hold_file:
        _hold(args.hold_file, args.hold_seconds, rank)
    dist.barrier()
    dist.destroy_process_group()
    if args.linger_rank == rank and args.linger_seconds:
        import time

        print("smoke: rank=%d lingering %.0f s after the last collective" % (rank, args.linger_seconds), flush=True)
        time.sleep(args.linger_seconds)
    print("smoke: rank=%d done" % rank, flush=True)
    return 0


def _hold(path, seconds, rank, clock=None, sleep=None):
    """Wait until ``path`` exists, at most ``seconds``; past that, fail naming it."""
    import time

    clock, sleep = clock or time.monotonic, sleep or time.sleep
    print("smoke: rank=%d holding until %s exists" % (rank, path), flush=True)
    deadline = clock() + seconds
    while not os.path.exists(path):
        if clock() >= deadline:
            raise RuntimeError("--hold-file %s did not appear within %g s" % (path, seconds))
        sleep(0.2)
    print("smoke: rank=%d released by %s" % (rank, path), flush=True)


def loaded_ops():
    """The DeepSpeed op libraries this rank has loaded -> {module name: its file}."""
    return {name.rsplit(".", 1)[-1]: module.__file__ for name, module in list(sys.modules.items())
            if name.startswith("deepspeed.ops.") and (getattr(module, "__file__", None) or "").endswith(".so")}


def _time_is_up(rank, started, seconds, device):
    """Rank 0's verdict (its clock since the first step), the same on every rank (an all-reduce)."""
    import time

    import torch
    import torch.distributed as dist

    flag = torch.tensor([1.0 if rank == 0 and time.monotonic() - started >= seconds else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() > 0


def _engine(args, deepspeed, torch):
    """The DeepSpeed engine of the tiny model with the optimizer args name, and that optimizer (None when
    DeepSpeed makes it from the config)."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": args.zero_stage},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10 ** 9,
    }
    if args.optimizer == "fused_adam":
        # DeepSpeed builds its FusedAdam from the config on a GPU: the op must be in the wheel.
        optimizer = None
        config["optimizer"] = {"type": "Adam", "params": {"lr": 1e-2}}
    else:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        optimizer = DeepSpeedCPUAdam(model.parameters(), lr=1e-2)
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    return deepspeed.initialize(model=model, optimizer=optimizer, config=config)[0], optimizer


def _resume(args, engine, rank, world_size):
    """The first step to run: 1, or the one after the last checkpoint in --checkpoint-dir."""
    if not (args.checkpoint_dir and os.path.exists(os.path.join(args.checkpoint_dir, "latest"))):
        return 1
    # The model's weights and the step from the last checkpoint (a restart after a lost node may
    # have another world size; the ZeRO optimizer shards of the old one are not reloaded).
    path, client = engine.load_checkpoint(args.checkpoint_dir, load_module_only=True,
                                          load_optimizer_states=False, load_lr_scheduler_states=False)
    if not path:
        return 1
    first = int((client or {}).get("step", 0)) + 1
    print("smoke: rank=%d resumed from checkpoint step=%d world_size=%d" % (rank, first - 1, world_size),
          flush=True)
    return first


def train(args, rank, world_size, device):
    import time

    import torch

    ext_dir = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not ext_dir:
        ext_dir = tempfile.mkdtemp(prefix="smoke-torch-ext-")
        os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
    os.makedirs(ext_dir, exist_ok=True)
    before = sorted(os.listdir(ext_dir))

    import deepspeed

    torch.manual_seed(1234)
    engine, optimizer = _engine(args, deepspeed, torch)
    # DeepSpeed prints "<op> built successfully" when it loads an op, prebuilt or not: say which were loaded,
    # and from where (the wheel's files, not TORCH_EXTENSIONS_DIR, which the end of the job checks is empty).
    ops = loaded_ops()
    print("smoke: rank=%d ops loaded prebuilt (DeepSpeed's 'built successfully' is this load; nothing compiled): "
          "%s from %s" % (rank, ", ".join(sorted(ops)) or "none",
                          os.path.commonpath(list(ops.values())) if ops else "-"), flush=True)
    used = type(getattr(engine, "basic_optimizer", None) or optimizer).__name__
    generator = torch.Generator().manual_seed(rank)
    inputs = torch.randn(64, 16, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True)
    first = _resume(args, engine, rank, world_size)
    started = time.monotonic()
    for step in range(first, args.steps + 1):
        if args.max_seconds and step > first and _time_is_up(rank, started, args.max_seconds, device):
            print("smoke: rank=%d stopping after step %d: --max-seconds %g" % (rank, step - 1, args.max_seconds),
                  flush=True)
            break
        if args.fail_rank == rank and step == args.fail_step:
            _fail(args, rank, step)
        # The whole (tiny) data set every step: the printed loss falls when the optimizer works.
        loss = torch.nn.functional.mse_loss(engine(inputs.to(device)), targets.to(device))
        engine.backward(loss)
        engine.step()
        print("smoke: rank=%d step=%d loss=%.6f world_size=%d%s" % (
            rank, step, loss.item(), world_size, " time=%.3f" % time.time() if args.stamp else ""), flush=True)
        if args.checkpoint_dir and args.checkpoint_every and step % args.checkpoint_every == 0:
            engine.save_checkpoint(args.checkpoint_dir, tag="step%d" % step, client_state={"step": step})
            print("smoke: rank=%d checkpoint step=%d" % (rank, step), flush=True)
        if args.step_seconds:
            time.sleep(args.step_seconds)
    after = sorted(os.listdir(ext_dir))
    if after != before:
        raise RuntimeError("JIT build detected: %s gained %s" % (ext_dir, sorted(set(after) - set(before))))
    print("smoke: rank=%d optimizer=%s zero_stage=%d jit_build=none" % (rank, used, args.zero_stage), flush=True)


if __name__ == "__main__":
    sys.exit(main())
