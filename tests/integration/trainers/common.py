"""Shared by the trainer emulations (rank side): deterministic tensors, the per-rank
report, the rank entry point, safetensors bytes, and a DCP writer with torch 2.x's file
operations on torch 1.13's planner.

torch is imported inside functions only: the tests import the trainers' discovery code
(plain os calls) without torch.
"""
import importlib
import json
import mmap
import os
import struct
import time
import zlib


# ----------------------------------------------------------------------------- report

class Report:
    """What one rank of one trainer process did, written to REPORT_DIR/rank<R>.json at
    the end: the files it wrote (by step, relative to the step directory, final names),
    run-level files, the steps it finished saving, removed, discovered and loaded."""

    def __init__(self, cfg, rank):
        self.cfg = cfg
        self.rank = rank
        self.run = cfg["run"]
        self.data = {"rank": rank, "files": {}, "run_files": [], "saved": [], "removed": [],
                     "discovered": None, "loaded": None, "checked": 0, "notes": []}

    def file(self, step_name, rel):
        lst = self.data["files"].setdefault(step_name, [])
        if rel not in lst:
            lst.append(rel)

    def file_at(self, path):
        """Record a closed file given its final absolute path inside the run directory."""
        rel = os.path.relpath(path, self.run)
        head, _, rest = rel.partition("/")
        if rest:
            self.file(head, rest)
        elif head not in self.data["run_files"]:
            self.data["run_files"].append(head)

    def saved(self, step_name):
        self.data["saved"].append(step_name)

    def removed(self, step_name):
        self.data["removed"].append(step_name)

    def note(self, text):
        self.data["notes"].append(text)

    def write(self):
        d = self.cfg["report_dir"]
        tmp = os.path.join(d, f".rank{self.rank}.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.data, f)
        os.replace(tmp, os.path.join(d, f"rank{self.rank}.json"))


def rank_entry(rank, world, trainer, cfg):
    """run_gloo_ranks target: rank `rank` of trainer module trainers.<trainer>."""
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world)
    os.environ["LOCAL_RANK"] = str(rank)
    mod = importlib.import_module("trainers." + trainer)
    rep = Report(cfg, rank)
    mod.rank_main(rank, world, cfg, rep)
    rep.write()


def barrier(group=None):
    import torch.distributed as dist
    dist.barrier(group=group)


def wait_for(condition, description, timeout=10.0, poll=0.5):
    """OLMo-core's utils.wait_for: poll a condition, TimeoutError after `timeout`."""
    start = time.monotonic()
    while not condition():
        time.sleep(poll)
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{description} timed out")


# ----------------------------------------------------------------------------- tensors

def _seed(name, step):
    return (zlib.crc32(name.encode()) * 1000003 + step * 7919) % (2 ** 31)


def value(name, shape, step, dtype="float32"):
    """The deterministic full tensor `name` as it is at training step `step`."""
    import torch
    g = torch.Generator()
    g.manual_seed(_seed(name, step))
    if dtype == "int64":
        return torch.randint(-(2 ** 40), 2 ** 40, tuple(shape), generator=g, dtype=torch.int64)
    return torch.randn(tuple(shape), generator=g, dtype=torch.float32)


def equal(a, b):
    import torch
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
            and tuple(a.shape) == tuple(b.shape) and torch.equal(a, b))


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def chunk_bounds(n, world, rank):
    """torch's ChunkShardingSpec split of n rows: ceil(n/world) per rank, the last ones shorter."""
    per = -(-n // world)
    start = min(n, per * rank)
    return start, min(n, start + per)


# ----------------------------------------------------------------------------- safetensors

ST_CODE = {"float32": "F32", "int64": "I64", "uint8": "U8", "bfloat16": "BF16", "float16": "F16"}
ST_ALIGN = {"U8": 1, "I8": 1, "BOOL": 0, "F16": 2, "BF16": 2, "I16": 2, "F32": 3, "I32": 3,
            "F64": 4, "I64": 4}


def tensor_bytes(t):
    return t.contiguous().numpy().tobytes()


def safetensors_file_bytes(tensors, metadata=None):
    """The bytes safetensors' save_file writes for {name: tensor}: u64 header length,
    JSON header padded with spaces to 8 bytes, data ordered by descending dtype
    alignment, then name."""
    items = []
    for name, t in tensors.items():
        code = ST_CODE[str(t.dtype).replace("torch.", "")]
        items.append((name, code, list(t.shape), tensor_bytes(t)))
    items.sort(key=lambda e: (-ST_ALIGN[e[1]], e[0]))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, code, shape, data in items:
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(e[3] for e in items)


class SafeOpen:
    """safetensors' safe_open on a local file: the file mmapped read-only, tensors
    sliced out of the map (what safe_open / load_file do)."""

    TORCH = {"F32": "float32", "I64": "int64", "U8": "uint8", "BF16": "bfloat16", "F16": "float16"}

    def __init__(self, path):
        self.f = open(path, "rb")
        self.map = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ)
        (n,) = struct.unpack("<Q", self.map[:8])
        self.header = json.loads(bytes(self.map[8:8 + n]))
        self.header.pop("__metadata__", None)
        self.base = 8 + n

    def keys(self):
        return list(self.header)

    def get_tensor(self, name):
        import torch
        e = self.header[name]
        s, t = e["data_offsets"]
        data = bytearray(self.map[self.base + s:self.base + t])
        dtype = getattr(torch, self.TORCH[e["dtype"]])
        if not data:
            return torch.zeros(e["shape"], dtype=dtype)
        return torch.frombuffer(data, dtype=dtype).reshape(e["shape"]).clone()

    def close(self):
        self.map.close()
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def load_safetensors(path):
    with SafeOpen(path) as f:
        return {k: f.get_tensor(k) for k in f.keys()}


# ----------------------------------------------------------------------------- DCP

def torch2_writer(path, rep=None, step_name=None, prefix=""):
    """A torch 1.13 StorageWriter with torch >= 2.0's FileSystemWriter file operations
    (torch/distributed/checkpoint/filesystem.py, 2.x): every rank creates the directory
    (os.makedirs exist_ok) in prepare_local_plan; one file per rank (single_file_per_rank,
    the 2.x default) `__<R>_0.distcp`, written and fsynced; the coordinator writes
    `.metadata.tmp`, fsyncs it, removes an existing `.metadata`, and renames it into place.
    Files are recorded in `rep` under `step_name`, relative to the step (`prefix` is the
    writer's directory inside the step, '' or 'model_and_optim/')."""
    import dataclasses
    import pickle
    from pathlib import Path

    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard.checkpoint.filesystem import _StoragePrefix

    class Torch2FileSystemWriter(dcp.FileSystemWriter):
        def __init__(self):
            super().__init__(path, single_file_per_rank=True, sync_files=True)

        def prepare_local_plan(self, plan):
            os.makedirs(self.path, exist_ok=True)
            return plan

        def prepare_global_plan(self, global_plan):
            return [dataclasses.replace(p, storage_data=_StoragePrefix(f"__{i}_"))
                    for i, p in enumerate(global_plan)]

        def write_data(self, plan, planner):
            fut = super().write_data(plan, planner)
            if rep is not None:
                for wr in fut.wait():
                    rep.file(step_name, prefix + wr.storage_data.relative_path)
            return fut

        def finish(self, metadata, results):
            storage_md = {}
            for wr_list in results:
                storage_md.update({wr.index: wr.storage_data for wr in wr_list})
            metadata.storage_data = storage_md
            tmp = Path(self.path) / ".metadata.tmp"
            final = Path(self.path) / ".metadata"
            with open(tmp, "wb") as f:
                pickle.dump(metadata, f)
                os.fsync(f.fileno())
            if os.path.exists(final):
                os.remove(final)
            os.rename(tmp, final)
            if rep is not None:
                rep.file(step_name, prefix + ".metadata")

    return Torch2FileSystemWriter()


def sharded(full, world, rank):
    """A ChunkShardingSpec (dim 0) ShardedTensor over all ranks holding `full`'s rows."""
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world)])
    st = sharded_tensor.empty(spec, *full.shape, dtype=full.dtype)
    for shard in st.local_shards():
        o, n = shard.metadata.shard_offsets[0], shard.metadata.shard_sizes[0]
        shard.tensor.copy_(full[o:o + n])
    return st


def check_sharded(st, full, what):
    for shard in st.local_shards():
        o, n = shard.metadata.shard_offsets[0], shard.metadata.shard_sizes[0]
        check(equal(shard.tensor, full[o:o + n].contiguous()), f"{what}: shard at row {o} differs")


def dcp_state(spec, objects, step, world, rank, empty=False):
    """A flat DCP state dict: spec {fqn: (shape, "sharded"|"plain")} of tensors with the
    values of `step` (zeros when `empty`, the destination of a load), and non-tensor items
    (None when `empty`)."""
    import torch
    sd = {}
    for name, (shape, kind) in spec.items():
        full = torch.zeros(shape) if empty else value(name, shape, step)
        sd[name] = sharded(full, world, rank) if kind == "sharded" else full
    for name, obj in objects.items():
        sd[name] = None if empty else obj
    return sd


def dcp_check(sd, spec, objects, step, what):
    """Compare a loaded DCP state dict with the values of `step`; returns the count."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    n = 0
    for name, (shape, kind) in spec.items():
        full = value(name, shape, step)
        if isinstance(sd[name], ShardedTensor):
            check_sharded(sd[name], full, f"{what}: {name}")
        else:
            check(equal(sd[name], full), f"{what}: {name} differs")
        n += 1
    for name, obj in objects.items():
        check(sd[name] == obj, f"{what}: {name} = {sd[name]!r}, saved {obj!r}")
        n += 1
    return n
