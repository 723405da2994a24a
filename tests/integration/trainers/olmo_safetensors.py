"""OLMo-core's own safetensors distributed format (seed olmo-core-safetensors-distributed.txt):
save_model_and_optim_state(dir, model, optim) = Checkpointer().save(dir/model, model
state) then Checkpointer().save(dir/optim, flattened optimizer state); FSDP-style flat
shards (flattened_offsets) on 2 ranks; safetensors files written as the safetensors
library writes them (header JSON + raw bytes, common.safetensors_file_bytes).

Checkpointer.save(D, state) on every rank (local D, save_overwrite=False):
  barrier; mkdir -p D; dir_is_empty(D) (a listing; FileExistsError if not); barrier;
  all_gather_object(save plans); all_gather_object(metadata);
  write D/rank_<R>.safetensors (sharded tensors' local ranges; unsharded tensors only
  on rank 0, the first rank's plan wins); rank 0: open(D/metadata.json, "w"), json.dump;
  barrier
Load (load_model_and_optim_state): metadata.json of model/ and optim/, each rank's
  ranges copied from the overlapping files (safe_open = mmap); unshard_model_state on
  rank 0 (every file, full tensors).

The training loop around it is user code (the seed has no loop, discovery or pruning):
save every `interval` steps into RUN/step<N>; resume from the newest step<N> whose
model/metadata.json and optim/metadata.json exist; keep the newest `keep` steps by
shutil.rmtree of older ones on rank 0 after a barrier.
"""
import json
import os
import pickle
import re
import shutil
import time
from pathlib import Path

from .common import SafeOpen, barrier, check, equal, safetensors_file_bytes, value

MODEL = {"embeddings.weight": (10, 6), "blocks.0.attention.w_q.weight": (6, 6),
         "blocks.0.attention_norm.weight": (6,)}
ST = {"float32": "F32", "int64": "I64", "uint8": "U8"}


def all_gather_object(obj):
    import torch.distributed as dist
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def dir_is_empty(d):
    d = Path(d)
    if not d.is_dir():
        return True
    try:
        next(d.glob("*"))
        return False
    except StopIteration:
        return True


def flat_range(numel, world, rank):
    per = -(-numel // world)
    s = min(numel, per * rank)
    return s, min(numel, s + per)


# ----------------------------------------------------------------------------- state dicts

def model_state(step, world, rank):
    """{key: (full shape, is_sharded, local flat tensor, [(start, end)])}"""
    out = {}
    for k, shape in MODEL.items():
        full = value(k, shape, step).reshape(-1)
        s, e = flat_range(full.numel(), world, rank)
        out[k] = (list(shape), True, full[s:e].clone(), [[s, e]])
    return out


def optim_state(step, world, rank):
    import torch
    out = {}
    names = list(MODEL)
    out["num_param_groups"] = ([], False, torch.tensor([1], dtype=torch.int64), [[0, 1]])
    group = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1,
             "params": list(range(len(names))), "_param_names": names}
    blob = torch.tensor(list(pickle.dumps(group)), dtype=torch.uint8)
    out["param_group0"] = ([blob.numel()], False, blob, [[0, blob.numel()]])
    keys = torch.tensor(list(pickle.dumps(sorted(["exp_avg", "step"]))), dtype=torch.uint8)
    out["state_keys"] = ([keys.numel()], False, keys, [[0, keys.numel()]])
    for k, shape in MODEL.items():
        full = value(k + ".exp_avg", shape, step).reshape(-1)
        s, e = flat_range(full.numel(), world, rank)
        out[f"state.{k}.__exp_avg"] = (list(shape), True, full[s:e].clone(), [[s, e]])
        out[f"state.{k}.__step"] = ([], False, torch.tensor([float(step)]), [[0, 1]])
    return out


def full_value(key, shape, step):
    """The full flat tensor of `key` in the model or optimizer state at `step`."""
    import torch
    if key in MODEL:
        return value(key, shape, step).reshape(-1)
    if key.endswith(".__exp_avg"):
        return value(key[len("state."):-len(".__exp_avg")] + ".exp_avg", shape, step).reshape(-1)
    if key.endswith(".__step"):
        return torch.tensor([float(step)])
    return None


# ----------------------------------------------------------------------------- Checkpointer

class Checkpointer:
    METADATA_FILENAME = "metadata.json"

    def __init__(self, rank, world, rep, step_name, group):
        self.rank, self.world, self.rep = rank, world, rep
        self.step_name, self.group = step_name, group

    def save(self, d, state):
        d = str(d).rstrip("/")
        local_dir = Path(d)
        barrier()
        local_dir.mkdir(parents=True, exist_ok=True)
        if not dir_is_empty(local_dir):
            raise FileExistsError(f"Checkpoint directory '{local_dir}' is not empty!")
        barrier()
        plans = {k: {"is_sharded": sh, "ranges": rg} for k, (shape, sh, t, rg) in state.items()}
        all_plans = all_gather_object(plans)
        metas = {k: (shape, sh, ST[str(t.dtype).replace("torch.", "")], rg)
                 for k, (shape, sh, t, rg) in state.items()}
        all_metas = all_gather_object(metas)
        # merged metadata: sharded tensors from every rank, unsharded from the first rank
        tensors = {}
        for r, rank_meta in enumerate(all_metas):
            for k, (shape, sh, dtype, rg) in rank_meta.items():
                fname = f"rank_{r}.safetensors"
                if k not in tensors:
                    tensors[k] = {"shape": shape, "is_sharded": sh, "dtype": dtype, "shard_spec_per_file": {}}
                elif not sh:
                    continue
                tensors[k]["shard_spec_per_file"][fname] = {
                    "flattened_offsets": rg, "local_shape": None, "global_offset": None}
        del all_plans
        local = {k: t for k, (shape, sh, t, rg) in state.items()
                 if f"rank_{self.rank}.safetensors" in tensors[k]["shard_spec_per_file"]}
        path = local_dir / f"rank_{self.rank}.safetensors"
        with open(path, "wb") as f:
            f.write(safetensors_file_bytes(local))
        self.rep.file(self.step_name, f"{self.group}/rank_{self.rank}.safetensors")
        if self.rank == 0:
            with open(local_dir / self.METADATA_FILENAME, "w") as f:
                json.dump({"tensors": tensors}, f)
            self.rep.file(self.step_name, f"{self.group}/{self.METADATA_FILENAME}")
        barrier()

    def get_metadata(self, d):
        with open(os.path.join(d, self.METADATA_FILENAME)) as f:
            return json.load(f)

    def load_local(self, d, state, step, what):
        """Each rank's ranges of every key, copied from the overlapping files."""
        md = self.get_metadata(d)
        files = {}
        n = 0
        try:
            for k, (shape, sh, t, rg) in state.items():
                meta = md["tensors"][k]
                check(meta["shape"] == shape, f"{what}: {k} shape {meta['shape']} != {shape}")
                out = t.clone().fill_(0) if t.dtype.is_floating_point else t.clone().zero_()
                pos = 0
                for s, e in rg:
                    for fname, spec in meta["shard_spec_per_file"].items():
                        fpos = 0
                        for fs, fe in spec["flattened_offsets"]:
                            lo, hi = max(s, fs), min(e, fe)
                            if lo < hi:
                                if fname not in files:
                                    files[fname] = SafeOpen(os.path.join(d, fname))
                                src = files[fname].get_tensor(k)
                                out[pos + lo - s:pos + hi - s] = src[fpos + lo - fs:fpos + hi - fs]
                            fpos += fe - fs
                    pos += e - s
                check(equal(out, t), f"{what}: {k} differs")
                n += 1
        finally:
            for f in files.values():
                f.close()
        return n

    def unshard(self, d):
        md = self.get_metadata(d)
        import torch
        out = {}
        for k, meta in md["tensors"].items():
            numel = 1
            for x in meta["shape"]:
                numel *= x
            dtype = {"F32": torch.float32, "I64": torch.int64, "U8": torch.uint8}[meta["dtype"]]
            full = torch.zeros(max(numel, 1), dtype=dtype)
            for fname, spec in meta["shard_spec_per_file"].items():
                with SafeOpen(os.path.join(d, fname)) as f:
                    src = f.get_tensor(k)
                fpos = 0
                for s, e in spec["flattened_offsets"]:
                    full[s:e] = src[fpos:fpos + e - s]
                    fpos += e - s
            out[k] = full
        return out


def save_model_and_optim_state(d, step, rank, world, rep):
    name = os.path.basename(str(d).rstrip("/"))
    Checkpointer(rank, world, rep, name, "model").save(f"{d}/model", model_state(step, world, rank))
    Checkpointer(rank, world, rep, name, "optim").save(f"{d}/optim", optim_state(step, world, rank))


# ----------------------------------------------------------------------------- the user's loop

STEP_RE = re.compile(r"^step(\d+)$")


def steps_in(run):
    out = []
    for name in os.listdir(run):
        m = STEP_RE.match(name)
        if m:
            out.append((int(m.group(1)), name))
    return sorted(out)


def discover(run):
    if not os.path.isdir(run):
        return None
    best = None
    for n, name in steps_in(run):
        if (os.path.exists(os.path.join(run, name, "model", "metadata.json"))
                and os.path.exists(os.path.join(run, name, "optim", "metadata.json"))):
            best = name
    return best


def rank_main(rank, world, cfg, rep):
    import torch.distributed as dist
    run = cfg["run"]
    step = 0
    found = None
    if rank == 0:
        found = discover(run)
    box = [found]
    dist.broadcast_object_list(box, src=0)
    found = box[0]
    if found is not None:
        rep.data["discovered"] = found
        step = int(STEP_RE.match(found).group(1))
        d = os.path.join(run, found)
        ck = Checkpointer(rank, world, rep, found, "model")
        n = ck.load_local(f"{d}/model", model_state(step, world, rank), step, f"load of {found}/model")
        n += ck.load_local(f"{d}/optim", optim_state(step, world, rank), step, f"load of {found}/optim")
        if rank == 0:
            full = ck.unshard(f"{d}/model")
            for k, shape in MODEL.items():
                check(equal(full[k], full_value(k, shape, step)), f"unshard of {found}/model: {k} differs")
                n += 1
        rep.data["loaded"] = found
        rep.data["checked"] = n
    while step < cfg["steps"]:
        barrier()
        time.sleep(cfg.get("step_time", 0.05))
        step += 1
        if step % cfg["interval"] == 0:
            name = f"step{step}"
            save_model_and_optim_state(os.path.join(run, name), step, rank, world, rep)
            rep.saved(name)
            keep = cfg.get("keep")
            barrier()
            if keep and rank == 0:
                for _, old in steps_in(run)[:-keep]:
                    shutil.rmtree(os.path.join(run, old))
                    rep.removed(old)
    barrier()
