"""RecIS's Saver and CheckpointManager (seed recis-saver.txt) through fsspec's local
filesystem (open = builtin open, exists = os.path.exists, makedirs = os.makedirs,
rm(recursive) = shutil.rmtree), a dense model (no sparse hashtables, so no SSaver files
and no barrier in save), one registered IO state (a dataset), shards = ranks
(RANK / WORLD_SIZE).

CheckpointManager.step(): global_step += 1; every save_interval steps
Saver.save(f"ckpt_{global_step}", rank, world), which does on every rank:
  exists(OUT/ckpt_N), else makedirs(OUT/ckpt_N/, exist_ok=True)
  open(OUT/ckpt_N/io_state_<shard>.pt, "wb"): torch.save({name: dump_io_state()})
and on shard 0 only, in this order:
  open(OUT/ckpt_N/model.pt, "wb"): torch.save(dense state dict)
  open(OUT/ckpt_N/extra.pt, "wb"): torch.save({"global_step": tensor, ...})
  open(OUT/ckpt_N/io_state_count, "w+"): write str(shard_num)
  open(OUT/checkpoint, "a+"): write "ckpt_N\\n"           (the run's index, appended)
  if more than max_keep ids were saved BY THIS PROCESS: rm -r OUT/<oldest>/, read
    OUT/checkpoint, rewrite it ("w") without that id
There is no barrier: shard 1's io_state_1.pt may land after the index names the step.
CheckpointManager.restore(): exists(OUT/checkpoint) -> read it, the last non-empty line
  is the checkpoint; load model.pt, extra.pt, io_state_count and io_state_<shard>.pt.
A new process starts with an empty list, so max_keep never removes an earlier
process's checkpoints.
"""
import os
import time

from .common import barrier, check, equal, value

DENSE = {"dense.0.weight": (8, 4), "dense.0.bias": (8,), "dense.1.weight": (2, 8)}


class Dataset:
    """An IO object with dump_io_state / load_io_state (a reader's position)."""

    def __init__(self, rank, world):
        self.rank = rank
        self._worker_num = world
        self.position = 0
        self.loaded = None

    def dump_io_state(self):
        return {"position": self.position, "rank": self.rank}

    def load_io_state(self, state):
        self.loaded = state


class Optimizer:
    def __init__(self):
        self.state = {}

    def state_dict(self):
        return dict(self.state)

    def load_state_dict(self, sd):
        self.state = dict(sd)


class Saver:
    def __init__(self, model_state, output_dir="./", max_keep=1, rep=None):
        self._model_state = model_state          # callable: the dense state dict now
        self._checkpoint_file = "checkpoint"
        self._checkpoint_version_list = []
        self._max_keep = max_keep
        self._extra_save_dict = {}
        self._output_dir = output_dir
        self._io_state = {}
        self.rep = rep

    def register_io_state(self, name, obj):
        if name in self._io_state:
            raise ValueError(f"name {name} already registered in io state")
        self._io_state[name] = obj

    def register_for_checkpointing(self, name, obj):
        if name in self._extra_save_dict:
            raise ValueError(f"name {name} already registered")
        self._extra_save_dict[name] = obj

    def get_extra_data(self, name):
        return self._extra_save_dict.get(name)

    def save(self, ckpt_id, shard_id=0, shard_num=1, late_s=0.0):
        import torch
        ckpt_path = os.path.join(self._output_dir, ckpt_id)
        if not os.path.exists(ckpt_path):
            os.makedirs(ckpt_path + "/", exist_ok=True)
        io_states = {name: io.dump_io_state() for name, io in self._io_state.items()}
        if io_states:
            if late_s:
                # a straggler shard: it gets here after shard 0 appended the id to the
                # index (the test's timing, polled), plus late_s
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if os.path.exists(os.path.join(self._output_dir, "checkpoint")) and \
                            ckpt_id in index_lines(self._output_dir):
                        break
                    time.sleep(0.01)
                time.sleep(late_s)
            path = os.path.join(ckpt_path, f"io_state_{shard_id}.pt")
            with open(path, "wb") as f:
                torch.save(io_states, f=f)
            self.rep.file(ckpt_id, f"io_state_{shard_id}.pt")
        if shard_id == 0:
            with open(os.path.join(ckpt_path, "model.pt"), "wb") as f:
                torch.save(self._model_state(), f=f)
            self.rep.file(ckpt_id, "model.pt")
            extra_save = {}
            for key, v in self._extra_save_dict.items():
                extra_save[key] = v.state_dict() if hasattr(v, "state_dict") else v
            with open(os.path.join(ckpt_path, "extra.pt"), "wb") as f:
                torch.save(extra_save, f=f)
            self.rep.file(ckpt_id, "extra.pt")
            if io_states:
                with open(os.path.join(ckpt_path, "io_state_count"), "w+") as f:
                    f.write(f"{shard_num}")
                self.rep.file(ckpt_id, "io_state_count")
            with open(os.path.join(self._output_dir, self._checkpoint_file), "a+") as out_f:
                out_f.write(ckpt_id + "\n")
            self.rep.file_at(os.path.join(self._output_dir, self._checkpoint_file))
            self._checkpoint_version_list.append(ckpt_id)
            if len(self._checkpoint_version_list) > self._max_keep:
                ckpt_id_to_remove = self._checkpoint_version_list[0]
                rm_recursive(os.path.join(self._output_dir, ckpt_id_to_remove + "/"))
                self.rep.removed(ckpt_id_to_remove)
                remains = []
                with open(os.path.join(self._output_dir, self._checkpoint_file), "r") as f:
                    lines = [ln.strip() for ln in f.read().split("\n") if len(ln.strip()) != 0]
                for cid in lines:
                    if cid != ckpt_id_to_remove:
                        remains.append(cid)
                with open(os.path.join(self._output_dir, self._checkpoint_file), "w") as f:
                    for cid in remains:
                        f.write(cid + "\n")
                self._checkpoint_version_list = self._checkpoint_version_list[1:]
        self.rep.saved(ckpt_id)

    def load(self, ckpt_id=None, shard_id=0):
        import torch
        ckpt_path = self._output_dir
        if ckpt_id is None:
            if os.path.exists(os.path.join(ckpt_path, self._checkpoint_file)):
                content = open(os.path.join(ckpt_path, self._checkpoint_file), "r").read()
                ckpt_id = None
                for line in content.split("\n")[::-1]:
                    if len(line) == 0:
                        continue
                    ckpt_id = line.strip()
                    break
            else:
                return None
        ckpt_dir = os.path.join(ckpt_path, ckpt_id)
        with open(os.path.join(ckpt_dir, "model.pt"), "rb") as f:
            dense = torch.load(f=f)
        with open(os.path.join(ckpt_dir, "extra.pt"), "rb") as f:
            extra_data = torch.load(f=f)
        with open(os.path.join(ckpt_dir, "io_state_count"), "r") as f:
            shard_num = int(f.read())
        with open(os.path.join(ckpt_dir, f"io_state_{shard_id}.pt"), "rb") as f:
            io_state = torch.load(f=f)
        for io_name, io in self._io_state.items():
            check(shard_num == io._worker_num,
                  f"IO states size not equal to worker num, expect: {io._worker_num}, got: {shard_num}")
            if io_name in io_state:
                io.load_io_state(io_state[io_name])
        for key, v in list(self._extra_save_dict.items()):
            if hasattr(v, "load_state_dict"):
                v.load_state_dict(extra_data[key])
            else:
                self._extra_save_dict[key] = extra_data[key]
        return ckpt_id, dense


def rm_recursive(path):
    """fsspec LocalFileSystem.rm(path, recursive=True): strip the trailing '/', rmtree a
    directory, remove a file."""
    import shutil
    p = path.rstrip("/")
    if os.path.isdir(p):
        shutil.rmtree(p)
    else:
        os.remove(p)


def discover(output_dir):
    """restore()'s choice: the last non-empty line of OUT/checkpoint, or None."""
    p = os.path.join(output_dir, "checkpoint")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        for line in f.read().split("\n")[::-1]:
            if line:
                return line.strip()
    return None


def index_lines(output_dir):
    with open(os.path.join(output_dir, "checkpoint")) as f:
        return [ln.strip() for ln in f.read().split("\n") if ln.strip()]


def rank_main(rank, world, cfg, rep):
    import torch
    out = cfg["run"]
    os.makedirs(out, exist_ok=True)       # the job's output dir
    state = {"step": 0}

    def dense_state():
        return {k: value(k, shape, state["step"]) for k, shape in DENSE.items()}

    saver = Saver(dense_state, output_dir=out, max_keep=cfg["max_keep"], rep=rep)
    data = Dataset(rank, world)
    saver.register_io_state("train_data", data)
    opt = Optimizer()
    saver.register_for_checkpointing("sparse_optim_conf", opt)
    # CheckpointManager(saver, save_interval)
    global_step = torch.scalar_tensor(0, dtype=torch.int64)
    if not saver.get_extra_data("global_step"):
        saver.register_for_checkpointing("global_step", global_step)
    # restore()
    got = saver.load(ckpt_id=None, shard_id=rank)
    if got is not None:
        ckpt_id, dense = got
        rep.data["discovered"] = rep.data["loaded"] = ckpt_id
        gs = saver.get_extra_data("global_step")
        step = int(gs)
        check(ckpt_id == f"ckpt_{step}", f"{ckpt_id} holds global_step {step}")
        for k, shape in DENSE.items():
            check(equal(dense[k], value(k, shape, step)), f"load of {ckpt_id}: {k} differs")
        check(opt.state.get("lr_step") == step, f"load of {ckpt_id}: optimizer state {opt.state}")
        check(data.loaded == {"position": step * 32, "rank": rank},
              f"load of {ckpt_id}: io state {data.loaded}")
        rep.data["checked"] = len(DENSE) + 2
        global_step = gs
    interval = cfg["save_interval"]
    late = cfg.get("late_rank_s", 0.0) if rank == world - 1 else 0.0
    for _ in range(cfg["steps"]):
        barrier()                                   # the step's collectives
        time.sleep(cfg.get("step_time", 0.05))
        global_step += 1                            # CheckpointManager.step()
        state["step"] = int(global_step)
        data.position = int(global_step) * 32
        opt.state = {"lr_step": int(global_step)}
        if global_step % interval == 0:
            saver.save(f"ckpt_{global_step}", rank, world, late_s=late)
    barrier()
