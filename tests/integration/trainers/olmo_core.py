"""OLMo-core's trainer checkpointing: `Checkpointer` (seed olmo-core-checkpointer.txt)
driven by `CheckpointerCallback` (seed olmo-core-checkpointer-callback.txt), sync and
async saves, on one node (fs-local rank == rank).

File operations of one save of step N into save folder RUN (every rank unless noted):
  _prepare_dir:   dir_is_empty(RUN/stepN): a listing (ENOENT: empty), the first entry
                  stat'ed; barrier
  _get_tmp_dir:   rank 0: rmtree(ignore_errors) RUN/stepN-tmp if it is a directory,
                  mkdir -p it; barrier;
                  wait_for(exists)
  _save_train_state: rank 0 mkdir stepN-tmp/train; wait_for(exists);
                  torch.save -> stepN-tmp/train/rank<R>.pt
  sync:  DCP save into stepN-tmp/model_and_optim through OLMo-core's own
         RemoteFileSystemWriter (src/olmo_core/distributed/checkpoint/filesystem.py; its
         local-path file operations, olmo_writer below): every rank mkdir -p the
         directory; per bucket of items (save_thread_count buckets, split by size and
         type) a tempfile.mktemp(suffix=".distcp") name in it, open "wb", items written,
         close, rename to __<R>_<n>.distcp, unlink(tmp, missing_ok=True); the coordinator
         pickles the metadata into a mktemp(suffix=".tmp") file, renames it to .metadata,
         unlinks the temp name (missing_ok). No fsync. The pickled _StorageInfo class is
         olmo_core.distributed.checkpoint.filesystem._StorageInfo, as OLMo-core writes it.
  _teardown_tmp_dir: barrier; rank 0 rename stepN-tmp -> stepN; wait_for(exists)
  async: the DCP save runs in a thread into RUN/stepN/model_and_optim AFTER the rename
         (staged copy taken before; the thread starts writing once the renamed step is
         there, the order the real async save has in practice: its planning collectives
         take longer than the rename)
  _save_metadata (sync: at once; async: the future's done callback), rank 0, write_file:
         mkdir -p stepN; NamedTemporaryFile(dir=stepN, delete=False) (O_EXCL, 0600);
         write, flush, fdatasync, close; stat stepN/.metadata.json (is_file, FileExistsError);
         mkdir -p stepN; rename tmp -> stepN/.metadata.json; close again;
         unlink(tmp, missing_ok=True) (ENOENT, ignored)
Removal of an old checkpoint (CheckpointerCallback._remove_checkpoint), rank 0: unlink
  stepN/.metadata.json (FileNotFoundError ignored), then clear_directory(stepN): if it is
  a directory, rmtree(ignore_errors=True).
Discovery (latest_checkpoint): list RUN, names ^step(\\d+)$ whose dir_is_checkpoint
  (stat .metadata, or train/rank0.pt + model_and_optim/.metadata + .metadata.json).
Load: torch.load train/rank<R>.pt (falls back to rank0.pt), DCP load of model_and_optim.

Deviation, said where it matters: an exception in the async done callback is raised at
the next await instead of ending in wait_for's timeout (the trainer fails either way).
"""
import json
import os
import re
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from .common import barrier, check, dcp_check, dcp_state, wait_for

METADATA_FNAME = ".metadata.json"
CHECKPOINT_DIR = "step{step}"
VERSION = "2.1.0"
FS_TIMEOUT = 120.0
SAVE_THREAD_COUNT = 2       # Checkpointer.save_thread_count: files per rank

# The train module's state dict (DCP keys as torch 2.x flattens OLMo-core's
# {"model": ..., "optim": ...}), and non-tensor items.
SPEC = {
    "model.embeddings.weight": ((10, 6), "sharded"),
    "model.blocks.0.attention.w_q.weight": ((6, 6), "sharded"),
    "model.lm_head.norm.weight": ((6,), "plain"),
    "optim.state.embeddings.weight.exp_avg": ((10, 6), "sharded"),
    "optim.state.embeddings.weight.step": ((), "plain"),
}
OBJECTS = {"optim.param_groups.embeddings.weight.lr": 0.001,
           "optim.param_groups.embeddings.weight.betas": (0.9, 0.95)}


# ----------------------------------------------------------------------------- olmo_core.io
# (the local-path branches of src/olmo_core/io.py)

def file_exists(path):
    return Path(path).exists()


def list_directory(d, include_files=True, include_dirs=True):
    for p in Path(d).iterdir():
        if (p.is_file() and include_files) or (p.is_dir() and include_dirs):
            yield str(p)


def dir_is_empty(d):
    try:
        next(list_directory(d))
        return False
    except (StopIteration, FileNotFoundError):
        return True


def clear_directory(d):
    if Path(d).is_dir():
        shutil.rmtree(d, ignore_errors=True)


def remove_file(path):
    Path(path).unlink()


# ----------------------------------------------------------------------------- the DCP writer

def olmo_storage_info_class():
    """olmo_core.distributed.checkpoint.filesystem._StorageInfo, registered under that
    module name so that pickle writes (and reads) the GLOBAL OLMo-core's files carry."""
    import dataclasses
    import sys
    import types
    name = "olmo_core.distributed.checkpoint.filesystem"
    mod = sys.modules.get(name)
    if mod is None:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            if sub not in sys.modules:
                sys.modules[sub] = types.ModuleType(sub)
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[sub])
        mod = sys.modules[name]

        @dataclasses.dataclass
        class _StorageInfo:
            relative_path: str
            offset: int
            length: int

        _StorageInfo.__module__ = name
        _StorageInfo.__qualname__ = "_StorageInfo"
        mod._StorageInfo = _StorageInfo
    return mod._StorageInfo


def _split_by_size_and_type(bins, items):
    """OLMo-core's bucketing: bytes items round robin, tensors (largest first) into the
    bucket with the fewest bytes."""
    from torch.distributed._shard.checkpoint.planner import WriteItemType
    if bins == 1:
        return [items]

    def size(wi):
        n = 1
        for d in wi.tensor_data.size:
            n *= d
        return n * _elsize(wi.tensor_data.properties.dtype)

    bytes_w = [wi for wi in items if wi.type == WriteItemType.BYTE_IO]
    tensor_w = sorted((wi for wi in items if wi.type != WriteItemType.BYTE_IO), key=size, reverse=True)
    buckets = [[] for _ in range(bins)]
    sizes = [0] * bins
    for i, wi in enumerate(bytes_w):
        buckets[i % bins].append(wi)
    for wi in tensor_w:
        idx = min(range(bins), key=lambda k: sizes[k])
        buckets[idx].append(wi)
        sizes[idx] += size(wi)
    return buckets


def _elsize(dtype):
    import torch
    return torch.empty((), dtype=dtype).element_size()


def olmo_writer(path, rep, step_name, prefix, thread_count):
    """A torch 1.13 StorageWriter with the file operations of OLMo-core's
    RemoteFileSystemWriter for a local path (see the module docstring)."""
    import dataclasses
    import pickle
    import tempfile as tf
    from pathlib import Path as P

    import torch
    from torch.distributed._shard.checkpoint import StorageWriter
    from torch.distributed._shard.checkpoint.filesystem import _StoragePrefix
    from torch.distributed._shard.checkpoint.storage import WriteResult

    StorageInfo = olmo_storage_info_class()

    def write_items(file_path, storage_key, items, planner):
        results = []
        tmp_path = P(tf.mktemp(suffix=".distcp", dir=P(file_path).parent))
        try:
            with tmp_path.open("wb") as tmp_file:
                for write_item in items:
                    offset = tmp_file.tell()
                    data = planner.resolve_data(write_item)
                    if isinstance(data, torch.Tensor):
                        data = data.cpu()
                        if data.storage().size() != data.numel():
                            data = data.clone()
                        torch.save(data, tmp_file)
                    else:
                        tmp_file.write(data.getbuffer())
                    length = tmp_file.tell() - offset
                    results.append(WriteResult(index=write_item.index, size_in_bytes=length,
                                               storage_data=StorageInfo(storage_key, offset, length)))
            tmp_path.rename(file_path)
        finally:
            tmp_path.unlink(missing_ok=True)
        rep.file(step_name, prefix + storage_key)
        return results

    class OlmoRemoteFileSystemWriter(StorageWriter):
        def __init__(self):
            super().__init__()
            self.path = str(path).rstrip("/")

        def init(self, is_coordinator):
            pass

        def prepare_local_plan(self, plan):
            P(self.path).mkdir(exist_ok=True, parents=True)
            return plan

        def prepare_global_plan(self, plans):
            return [dataclasses.replace(p, storage_data=_StoragePrefix(f"__{i}_")) for i, p in enumerate(plans)]

        def write_data(self, plan, planner):
            storage_plan = plan.storage_data
            results = []
            for n, bucket in enumerate(_split_by_size_and_type(thread_count, plan.items)):
                file_name = f"{storage_plan.prefix}{n}.distcp"
                results += write_items(f"{self.path}/{file_name}", file_name, bucket, planner)
            fut = torch.futures.Future()
            fut.set_result(results)
            return fut

        def finish(self, metadata, results):
            storage_md = {}
            for wr_list in results:
                storage_md.update({wr.index: wr.storage_data for wr in wr_list})
            metadata.storage_data = storage_md
            metadata_path = f"{self.path}/.metadata"
            tmp_path = P(tf.mktemp(suffix=".tmp", dir=P(metadata_path).parent))
            try:
                with tmp_path.open("wb") as tmp_file:
                    pickle.dump(metadata, tmp_file)
                tmp_path.rename(metadata_path)
            finally:
                tmp_path.unlink(missing_ok=True)
            rep.file(step_name, prefix + ".metadata")

    return OlmoRemoteFileSystemWriter()


# ----------------------------------------------------------------------------- discovery

def checkpoint_dirname(step):
    return CHECKPOINT_DIR.format(step=step)


def dir_is_checkpoint(d):
    if file_exists(f"{d}/.metadata"):
        return True
    for path in (f"{d}/train/rank0.pt", f"{d}/model_and_optim/.metadata", f"{d}/{METADATA_FNAME}"):
        if not file_exists(path):
            return False
    return True


def find_checkpoints(d, ephemeral=None):
    for path in list_directory(d):
        name = os.path.basename(path)
        m = re.match("^" + CHECKPOINT_DIR.format(step=r"(\d+)$"), name)
        if m is None:
            continue
        step = int(m.group(1))
        if not dir_is_checkpoint(path):
            continue
        if ephemeral is not None:
            with open(os.path.join(path, METADATA_FNAME)) as f:
                md = json.load(f)
            if bool(md.get("ephemeral")) != ephemeral:
                continue
        yield step, path


def contains_checkpoint(d):
    if dir_is_checkpoint(d):
        return True
    try:
        next(find_checkpoints(d))
        return True
    except (StopIteration, FileNotFoundError):
        return False


def latest_checkpoint(d):
    latest_step, latest = None, None
    for step, path in find_checkpoints(d):
        if latest_step is None or step > latest_step:
            latest_step, latest = step, path
    if latest is None:
        raise FileNotFoundError(f"No checkpoints found in '{d}'")
    return latest


def discover(run):
    """The name of the checkpoint the trainer would resume from, or None."""
    if not os.path.isdir(run) or not contains_checkpoint(run):
        return None
    return os.path.basename(latest_checkpoint(run))


# ----------------------------------------------------------------------------- Checkpointer

class Checkpointer:
    def __init__(self, work_dir, rank, world, rep, process_group=None):
        self.work_dir = Path(work_dir)
        self.rank, self.world, self.rep = rank, world, rep
        self.process_group = process_group
        self.callback_errors = []
        if self.rank == 0:                       # get_fs_local_rank() == 0
            self.work_dir.mkdir(exist_ok=True, parents=True)

    # -- the state
    def _train_state(self, step):
        import torch
        return {"global_step": step, "global_train_tokens_seen": step * 1024, "max_steps": 1000,
                "world_size": self.world, "rng": torch.tensor([step, self.rank]),
                "data_loader": {"epoch": 1, "batches_processed": step}}

    # -- save
    def save(self, d, step, ephemeral=False):
        d = str(d)
        name = os.path.basename(d)
        with self._temporary_wd(d, name) as wd:
            self._save_train_state(d, wd, step, name)
            sd = dcp_state(SPEC, OBJECTS, step, self.world, self.rank)
            self._dcp_save(sd, wd / "model_and_optim", name, self.process_group)
        self._save_metadata(d, {"ephemeral": ephemeral, "version": VERSION})

    def save_async(self, d, step, ephemeral=False):
        d = str(d)
        name = os.path.basename(d)
        go = threading.Event()
        future = Future()
        with self._temporary_wd(d, name) as wd:
            self._save_train_state(d, wd, step, name)
            # staging: the state dict is copied now, written by the thread
            sd = dcp_state(SPEC, OBJECTS, step, self.world, self.rank)

            def background():
                try:
                    go.wait()
                    self._dcp_save(sd, Path(d) / "model_and_optim", name, self.process_group)
                    future.set_result(None)
                except BaseException as e:   # noqa: BLE001
                    future.set_exception(e)

            threading.Thread(target=background, daemon=True).start()
        go.set()

        def done_callback(fut):
            try:
                if fut.exception() is None:
                    self._save_metadata(d, {"ephemeral": ephemeral, "version": VERSION})
            except BaseException as e:   # noqa: BLE001
                self.callback_errors.append(e)

        future.add_done_callback(done_callback)
        return future

    def _dcp_save(self, sd, path, name, pg):
        import torch.distributed._shard.checkpoint as dcp
        writer = olmo_writer(str(path), self.rep, name, "model_and_optim/", SAVE_THREAD_COUNT)
        dcp.save_state_dict(sd, writer, process_group=pg)

    def write_file(self, d, fname, contents):
        Path(d).mkdir(exist_ok=True, parents=True)
        mode = "wb" if isinstance(contents, bytes) else "wt"
        tmp_file = tempfile.NamedTemporaryFile(mode=mode, delete=False, dir=d)
        tmp_path = Path(tmp_file.name)
        try:
            tmp_file.write(contents)
            tmp_file.flush()
            os.fdatasync(tmp_file.fileno())
            tmp_file.close()
            target = Path(d) / fname
            if target.is_file():
                raise FileExistsError(target)
            target.parent.mkdir(exist_ok=True, parents=True)
            tmp_path.replace(target)
            return target
        finally:
            tmp_file.close()
            tmp_path.unlink(missing_ok=True)

    def _save_metadata(self, d, metadata):
        if self.rank == 0:
            target = self.write_file(d, METADATA_FNAME, json.dumps(metadata))
            self.rep.file(os.path.basename(d), METADATA_FNAME)
            return target

    def _save_train_state(self, d, wd, step, name):
        train_dir = wd / "train"
        if self.rank == 0:
            train_dir.mkdir(exist_ok=True, parents=True)
        wait_for(train_dir.exists, f"waiting for '{train_dir}' to be created...", timeout=FS_TIMEOUT)
        import torch
        torch.save(self._train_state(step), train_dir / f"rank{self.rank}.pt")
        self.rep.file(name, f"train/rank{self.rank}.pt")

    def _prepare_dir(self, d):
        if not dir_is_empty(d):
            raise FileExistsError(d)
        barrier()
        return d

    def _get_tmp_dir(self, d):
        tmp_dir = Path(d).with_name(Path(d).name + "-tmp")
        if self.rank == 0:
            clear_directory(tmp_dir)
            tmp_dir.mkdir(exist_ok=True, parents=True)
        barrier()
        wait_for(lambda: tmp_dir.exists(), "Waiting for checkpoint directory", timeout=FS_TIMEOUT)
        return tmp_dir

    def _teardown_tmp_dir(self, d, tmp_dir):
        barrier()
        if self.rank == 0:
            try:
                tmp_dir.replace(str(d))
            except FileNotFoundError:
                if not Path(d).exists():
                    raise
        wait_for(lambda: Path(d).exists(), f"waiting for checkpoint directory '{d}'",
                 timeout=FS_TIMEOUT)

    class _WD:
        def __init__(self, outer, d, name):
            self.outer, self.d, self.name = outer, d, name

        def __enter__(self):
            self.d = self.outer._prepare_dir(self.d)
            self.tmp = self.outer._get_tmp_dir(self.d)
            return self.tmp

        def __exit__(self, exc_type, exc, tb):
            if exc_type is None:          # a contextmanager's code after `yield`
                self.outer._teardown_tmp_dir(self.d, self.tmp)
            return False

    def _temporary_wd(self, d, name):
        return self._WD(self, d, name)

    # -- load
    def load(self, d):
        import torch
        import torch.distributed._shard.checkpoint as dcp
        trainer_state = None
        for path in (f"{d}/train/rank{self.rank}.pt", f"{d}/train/rank0.pt"):
            try:
                trainer_state = torch.load(path)
                break
            except FileNotFoundError:
                pass
        check(trainer_state is not None, f"Missing trainer state in checkpoint dir '{d}'")
        step = trainer_state["global_step"]
        sd = dcp_state(SPEC, OBJECTS, step, self.world, self.rank, empty=True)
        olmo_storage_info_class()          # the class .metadata names must be importable
        dcp.load_state_dict(sd, dcp.FileSystemReader(f"{d}/model_and_optim"),
                            process_group=self.process_group)
        n = dcp_check(sd, SPEC, OBJECTS, step, f"load of {d}")
        return trainer_state, n


# ----------------------------------------------------------------------------- the callback

class CheckpointerCallback:
    """CheckpointerCallback with remove=ephemeral_only (default) or never."""

    def __init__(self, trainer, save_interval, ephemeral_save_interval=None, save_async=False,
                 remove="ephemeral_only", pre_train_checkpoint=None, fixed_steps=None):
        self.trainer = trainer
        self.save_interval = save_interval
        self.ephemeral_save_interval = ephemeral_save_interval
        self.save_async = save_async
        self.remove = remove
        self.pre_train_checkpoint = pre_train_checkpoint
        self.fixed_steps = fixed_steps
        self._future = None
        self._latest_checkpoint_step = -1
        self._latest_checkpoint_path = ""
        self._checkpoints = []
        self._ephemeral_checkpoints = []
        self._checkpoints_to_remove = []

    @property
    def step(self):
        return self.trainer.step

    @property
    def checkpoint_pending(self):
        return self._future is not None

    def _await_last_checkpoint(self, blocking=True):
        fut = self._future
        if fut is not None:
            if blocking or fut.done():
                fut.result()
                errs = self.trainer.checkpointer.callback_errors
                if errs:
                    raise errs[0]
                if self.trainer.rank == 0:
                    wait_for(lambda: dir_is_checkpoint(self._latest_checkpoint_path),
                             "waiting to finalize checkpoint", timeout=60)
                self._future = None
                self.trainer.rep.saved(os.path.basename(self._latest_checkpoint_path))
                return fut
        return None

    def _save_checkpoint(self, save_async=None, ephemeral=False):
        save_async = save_async if save_async is not None else self.save_async
        self._await_last_checkpoint()
        if save_async:
            path, self._future = self.trainer.save_checkpoint_async(ephemeral=ephemeral)
        else:
            path = self.trainer.save_checkpoint(ephemeral=ephemeral)
            self.trainer.rep.saved(os.path.basename(str(path)))
        self._latest_checkpoint_step = self.step
        self._latest_checkpoint_path = str(path)
        return str(path)

    def _remove_checkpoint(self, path):
        if self.trainer.rank == 0:
            try:
                remove_file(os.path.join(path, METADATA_FNAME))
            except FileNotFoundError:
                pass
            clear_directory(path)        # fs-local rank 0, run_bookkeeping_op(distributed=False)
            self.trainer.rep.removed(os.path.basename(path))

    def _remove_old_checkpoints(self):
        for path in self._checkpoints_to_remove:
            self._remove_checkpoint(path)
        self._checkpoints_to_remove.clear()

    def pre_train(self):
        if self.step == 0 and (self.pre_train_checkpoint or (
                self.pre_train_checkpoint is None and not self.trainer.checkpoint_loaded)):
            self._checkpoints.append(self._save_checkpoint())
        if self.remove != "never":
            found = []
            if self.trainer.rank == 0:
                try:
                    for step_num, path in find_checkpoints(self.trainer.save_folder):
                        if (step_num == 0 or step_num > self.step
                                or (self.fixed_steps is not None and step_num in self.fixed_steps)
                                or (self.save_interval is not None and step_num % self.save_interval == 0)):
                            continue
                        elif ((self.remove == "ephemeral_only" and self.ephemeral_save_interval is not None
                               and step_num % self.ephemeral_save_interval == 0)
                              or self.remove == "all_non_permanent"):
                            found.append((step_num, path))
                except FileNotFoundError:
                    pass
            found = broadcast_object(found)
            self._ephemeral_checkpoints = [p for _, p in sorted(found, key=lambda x: x[0])]

    def post_train_batch(self):
        self._await_last_checkpoint(blocking=False)
        if not self.checkpoint_pending:
            self._remove_old_checkpoints()
        if self.fixed_steps is not None and self.step in self.fixed_steps:
            self._checkpoints.append(self._save_checkpoint())
        elif self.save_interval is not None and self.step % self.save_interval == 0:
            self._checkpoints.append(self._save_checkpoint())
        elif self.ephemeral_save_interval is not None and self.step % self.ephemeral_save_interval == 0:
            self._ephemeral_checkpoints.append(self._save_checkpoint(ephemeral=True))
            while len(self._ephemeral_checkpoints) > 1:
                self._checkpoints_to_remove.append(self._ephemeral_checkpoints.pop(0))

    def post_train(self):
        if self.step > self._latest_checkpoint_step:
            self._checkpoints.append(self._save_checkpoint(save_async=False))
        self._await_last_checkpoint()


def broadcast_object(obj):
    import torch.distributed as dist
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class Trainer:
    """The parts of OLMo-core's Trainer that touch checkpoints: save_checkpoint[_async]
    into save_folder/step<N>, and maybe_load_checkpoint(save_folder) at fit()."""

    def __init__(self, save_folder, rank, world, rep, process_group=None):
        self.save_folder = save_folder
        self.rank, self.world, self.rep = rank, world, rep
        self.step = 0
        self.checkpoint_loaded = False
        self.checkpointer = Checkpointer(save_folder, rank, world, rep, process_group)

    def save_checkpoint(self, ephemeral=False):
        path = os.path.join(self.save_folder, checkpoint_dirname(self.step))
        self.checkpointer.save(path, self.step, ephemeral=ephemeral)
        return path

    def save_checkpoint_async(self, ephemeral=False):
        path = os.path.join(self.save_folder, checkpoint_dirname(self.step))
        return path, self.checkpointer.save_async(path, self.step, ephemeral=ephemeral)

    def maybe_load_checkpoint(self):
        should_load = True
        if self.rank == 0:
            should_load = contains_checkpoint(self.save_folder)
        should_load = broadcast_object(should_load)
        if should_load:
            d = self.save_folder
            if not dir_is_checkpoint(d):
                d = broadcast_object(latest_checkpoint(d) if self.rank == 0 else None)
            self.rep.data["discovered"] = os.path.basename(d)
            trainer_state, n = self.checkpointer.load(d)
            self.step = trainer_state["global_step"]
            self.checkpoint_loaded = True
            self.rep.data["loaded"] = os.path.basename(d)
            self.rep.data["checked"] = n


def rank_main(rank, world, cfg, rep):
    import torch.distributed as dist
    pg = None
    if cfg.get("async"):
        # pre_train: a separate process group for async checkpointing
        pg = dist.new_group(backend="gloo")
    trainer = Trainer(cfg["run"], rank, world, rep, process_group=pg)
    trainer.maybe_load_checkpoint()
    cb = CheckpointerCallback(trainer, cfg["save_interval"], cfg.get("ephemeral_save_interval"),
                              save_async=bool(cfg.get("async")), remove=cfg.get("remove", "ephemeral_only"))
    cb.pre_train()
    while trainer.step < cfg["max_steps"]:
        trainer.step += 1
        time.sleep(cfg.get("step_time", 0.1))      # the train batch
        cb.post_train_batch()
    cb.post_train()
    barrier()
