"""DeepSpeed's engine checkpointing (deepspeedai/DeepSpeed deepspeed/runtime/engine.py
save_checkpoint / load_checkpoint as on master, ZeRO stage 1/2 on data-parallel ranks, mp
world 1, TorchCheckpointEngine = torch.save / torch.load), 2 ranks. DeepSpeed has no
pruning of its own.

save_checkpoint(save_dir, tag=f"global_step{N}", save_latest=True):
  rank 0: os.makedirs(save_dir, exist_ok=True); barrier
  _checkpoint_tag_validation: all-reduces (max, min) of the tag's hash
  every rank: _create_checkpoint_file: os.makedirs(save_dir/tag, exist_ok=True);
    dp rank 0 (save_non_zero_checkpoint): torch.save -> save_dir/tag/mp_rank_00_model_states.pt
  every rank (save_zero_checkpoint): os.makedirs(save_dir/tag, exist_ok=True);
    torch.save -> save_dir/tag/zero_pp_rank_<dp>_mp_rank_00_optim_states.pt;
    rank 0 then copies zero_to_fp32.py into save_dir (shutil.copyfile) and chmods it +x
  rank 0: open(save_dir/"latest", "w").write(tag)     -- no barrier before it
  barrier
load_checkpoint(load_dir, tag=None): isfile(load_dir/latest) -> read the tag (else
  nothing to load); glob mp_rank_*_model_states.pt, torch.load; the dp_world_size it
  records; torch.load of every zero_pp_rank_<dp>_mp_rank_00_optim_states.pt.
"""
import glob
import os
import shutil
import stat
import time

from .common import barrier, check, equal, value

MODEL = {"module.embed.weight": (8, 4), "module.head.weight": (3, 4)}
FLAT = 44    # numel of MODEL, the fp32 flat group partitioned over dp ranks

RECOVERY_SCRIPT = b"#!/usr/bin/env python\n# zero_to_fp32.py (stand-in: the recovery script DeepSpeed copies)\n"


def model_states(step, world):
    import torch
    return {"module": {k: value(k, s, step) for k, s in MODEL.items()},
            "buffer_names": [], "optimizer": None, "param_shapes": [{k: torch.Size(s) for k, s in MODEL.items()}],
            "frozen_param_shapes": None, "shared_params": {}, "frozen_param_fragments": None,
            "lr_scheduler": {"last_epoch": step}, "data_sampler": None, "random_ltd": None,
            "sparse_tensor_module_names": set(), "skipped_steps": 0, "global_steps": step,
            "global_samples": step * 16, "dp_world_size": world, "mp_world_size": 1,
            "ds_config": {"zero_optimization": {"stage": 2}}, "ds_version": "0.16.4"}


def zero_states(step, world, dp_rank):
    per = -(-FLAT // world)
    full = value("fp32_flat_group", (per * world,), step)
    part = full[dp_rank * per:(dp_rank + 1) * per].clone()
    return {"optimizer_state_dict": {"zero_stage": 2, "loss_scaler": None, "dynamic_loss_scale": False,
                                     "overflow": False, "partition_count": [world],
                                     "single_partition_of_fp32_groups": [part],
                                     "base_optimizer_state": {"state": {0: {"exp_avg": part * 0.5}}}},
            "ds_config": {"zero_optimization": {"stage": 2}}, "ds_version": "0.16.4"}


class Engine:
    def __init__(self, rank, world, rep):
        self.rank, self.world, self.rep = rank, world, rep
        self.global_steps = 0
        self.save_non_zero_checkpoint = rank == 0     # dp rank 0 of the model-parallel group
        self.save_zero_checkpoint = True

    def _tag_validation(self, tag):
        import hashlib
        import torch
        import torch.distributed as dist
        h = torch.tensor(list(hashlib.sha1(tag.encode()).digest()), dtype=torch.uint8)
        hi, lo = h.clone(), h.clone()
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        check(bool((hi == h).all() and (lo == h).all()), f"checkpoint tag {tag} differs between ranks")

    def save_checkpoint(self, save_dir, tag=None, save_latest=True, late_s=0.0):
        import torch
        if self.rank == 0:
            os.makedirs(save_dir, exist_ok=True)
        barrier()
        if tag is None:
            tag = f"global_step{self.global_steps}"
        tag = str(tag)
        self._tag_validation(tag)
        path = os.path.join(save_dir, tag, "mp_rank_00_model_states.pt")
        os.makedirs(os.path.dirname(path), exist_ok=True)       # _create_checkpoint_file
        if self.save_non_zero_checkpoint:
            torch.save(model_states(self.global_steps, self.world), path)
            self.rep.file(tag, "mp_rank_00_model_states.pt")
        if self.save_zero_checkpoint:
            name = f"zero_pp_rank_{self.rank}_mp_rank_00_optim_states.pt"
            path = os.path.join(save_dir, tag, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if late_s:
                # a straggler: it gets here after rank 0 wrote `latest` (the test's
                # timing, polled), plus late_s
                wait_latest(save_dir, tag)
                time.sleep(late_s)
            torch.save(zero_states(self.global_steps, self.world, self.rank), path)
            self.rep.file(tag, name)
            if self.rank == 0:
                dst = os.path.join(save_dir, "zero_to_fp32.py")
                src = os.path.join(self.rep.cfg["report_dir"], "zero_to_fp32.py")
                if not os.path.exists(src):
                    with open(src, "wb") as f:
                        f.write(RECOVERY_SCRIPT)
                shutil.copyfile(src, dst)
                os.chmod(dst, os.stat(dst).st_mode | stat.S_IEXEC)
                self.rep.file_at(dst)
        if save_latest and self.rank == 0:
            with open(os.path.join(save_dir, "latest"), "w") as fd:
                fd.write(tag)
            self.rep.file_at(os.path.join(save_dir, "latest"))
        barrier()
        self.rep.saved(tag)
        return True

    def load_checkpoint(self, load_dir, tag=None):
        import torch
        if tag is None:
            latest_path = os.path.join(load_dir, "latest")
            if os.path.isfile(latest_path):
                with open(latest_path, "r") as fd:
                    tag = fd.read().strip()
            else:
                return None, None
        self.rep.data["discovered"] = tag
        names = sorted(glob.glob(os.path.join(load_dir, tag, "mp_rank_*_model_states.pt")))
        check(len(names) == 1, f"{load_dir}/{tag}: model states files {names}")
        sd = torch.load(names[0], map_location="cpu")
        step = sd["global_steps"]
        check(tag.endswith(str(step)), f"{tag} holds global_steps {step}")
        for k, s in MODEL.items():
            check(equal(sd["module"][k], value(k, s, step)), f"load of {tag}: {k} differs")
        n = len(MODEL)
        for dp in range(sd["dp_world_size"]):
            p = os.path.join(load_dir, tag, f"zero_pp_rank_{dp}_mp_rank_00_optim_states.pt")
            z = torch.load(p, map_location="cpu")
            want = zero_states(step, self.world, dp)["optimizer_state_dict"]["single_partition_of_fp32_groups"][0]
            got = z["optimizer_state_dict"]["single_partition_of_fp32_groups"][0]
            check(equal(got, want), f"load of {tag}: zero partition {dp} differs")
            n += 1
        self.global_steps = step
        self.rep.data["loaded"] = tag
        self.rep.data["checked"] = n
        return os.path.join(load_dir, tag), sd.get("client_state", {})


def wait_latest(save_dir, tag, timeout=60):
    deadline = time.monotonic() + timeout
    while discover(save_dir) != tag and time.monotonic() < deadline:
        time.sleep(0.01)


def discover(save_dir):
    p = os.path.join(save_dir, "latest")
    if not os.path.isfile(p):
        return None
    with open(p) as f:
        return f.read().strip()


def rank_main(rank, world, cfg, rep):
    save_dir = cfg["run"]
    eng = Engine(rank, world, rep)
    if cfg.get("load_tag"):
        eng.load_checkpoint(save_dir, tag=cfg["load_tag"])
    elif cfg.get("resume", True):
        eng.load_checkpoint(save_dir)
    late_at = set(cfg.get("late_at", []))
    first = eng.global_steps
    while eng.global_steps < cfg["steps"]:
        barrier()                                   # the step's all-reduce
        time.sleep(cfg.get("step_time", 0.05))
        eng.global_steps += 1
        if eng.global_steps % cfg["save_interval"] == 0:
            late = cfg.get("late_rank_s", 0.0) if (rank == world - 1 and eng.global_steps in late_at) else 0.0
            tag = cfg["tag_format"].format(eng.global_steps) if cfg.get("tag_format") else None
            eng.save_checkpoint(save_dir, tag=tag, save_latest=cfg.get("save_latest", True), late_s=late)
            if cfg.get("commit_recipe"):
                # the old docs/recipes.md: commit explicitly once every rank has returned
                barrier()
                if rank == 0:
                    os.setxattr(os.path.join(save_dir, tag or f"global_step{eng.global_steps}"),
                                "user.ckptfs.commit", b"1")
    rep.note(f"trained {first}..{eng.global_steps}")
