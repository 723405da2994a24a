"""torchtitan's CheckpointManager (seed torchtitan-checkpoint.txt), async_mode disabled
or "async", with keep_latest_k, on 2 ranks.

One save at step N (every rank; CheckpointManager.save):
  _async_wait: the previous async save's future .result()
  dcp.save (sync; also the forced save of the last step, _save_last_step) or
  dcp.async_save(process_group=the manager's gloo group): the state is staged (copied)
    at once and written by a thread, so the purge below runs while it writes;
    torch 2.x's FileSystemWriter file operations (common.torch2_writer): makedirs
    FOLDER/step-N, __<R>_0.distcp + fsync, rank 0 .metadata.tmp + fsync, rm .metadata if
    it exists, rename to .metadata
  _purge_stale_checkpoints (keep_latest_k > 0, every rank): os.listdir(FOLDER); for EVERY
    entry re.search(r"step-(\\d+)", name) and int(match.group(1)) (an entry without a step
    number raises AttributeError); sort; shutil.rmtree(path, ignore_errors=True) of all
    but the newest k
Load (load(step=-1)): isdir(FOLDER); listdir; names with step-(\\d+) whose
  FOLDER/name/.metadata isfile; the max; dcp.load of step-<max> (model only for step 0).
FOLDER = dump_folder/checkpoint (never the mount root: .ckptfs would be an entry).
"""
import os
import re
import shutil
import threading
import time
from concurrent.futures import Future

from .common import dcp_check, dcp_state, torch2_writer

SPEC = {
    "model.tok_embeddings.weight": ((12, 4), "sharded"),
    "model.layers.0.attention.wq.weight": ((8, 4), "sharded"),
    "model.norm.weight": ((4,), "plain"),
    "optimizer.state.tok_embeddings.weight.exp_avg": ((12, 4), "sharded"),
    "optimizer.state.tok_embeddings.weight.step": ((), "plain"),
    "train_state.step": ((), "plain"),
}


def objects(step):
    return {"optimizer.param_groups.tok_embeddings.weight.lr": 3e-4,
            "lr_scheduler": {"last_epoch": step, "_step_count": step + 1},
            "dataloader": {"rank_state": [step, 0]},
            "train_state.global_avg_losses": [1.0 / (s + 1) for s in range(step)]}


def create_checkpoint_id(folder, step):
    return os.path.join(folder, f"step-{step}")


def discover(folder):
    """load(step=-1)'s choice: the newest step-N with a .metadata file, or None."""
    if not os.path.isdir(folder):
        return None
    step_counts = []
    for filename in os.listdir(folder):
        match = re.search(r"step-(\d+)", filename)
        metadata_probe = os.path.join(folder, filename, ".metadata")
        if match and os.path.isfile(metadata_probe):
            step_counts.append(int(match.group(1)))
    if not step_counts:
        return None
    return f"step-{max(step_counts)}"


class CheckpointManager:
    def __init__(self, folder, interval, keep_latest_k, async_mode, rank, world, rep):
        import torch.distributed as dist
        self.folder = folder
        self.interval = interval
        self.keep_latest_k = keep_latest_k
        self.async_mode = async_mode
        self.rank, self.world, self.rep = rank, world, rep
        self.pg = dist.new_group(backend="gloo")
        self.async_future = None
        self._pending_name = None

    def _states(self, step):
        sd = dcp_state(SPEC, objects(step), step, self.world, self.rank)
        return sd

    def _dcp_save(self, sd, checkpoint_id, pg=None):
        import torch.distributed._shard.checkpoint as dcp
        name = os.path.basename(checkpoint_id)
        dcp.save_state_dict(sd, torch2_writer(checkpoint_id, self.rep, name), process_group=pg)

    def _async_save(self, sd, checkpoint_id):
        future = Future()

        def background():
            try:
                self._dcp_save(sd, checkpoint_id, self.pg)
                future.set_result(None)
            except BaseException as e:   # noqa: BLE001
                future.set_exception(e)

        threading.Thread(target=background, daemon=True).start()
        return future

    def _async_wait(self):
        if self.async_mode == "async" and self.async_future is not None:
            self.async_future.result()
            self.rep.saved(self._pending_name)
            self.async_future = None

    def save(self, curr_step, force=False):
        if not force and curr_step % self.interval != 0:
            return
        checkpoint_id = create_checkpoint_id(self.folder, curr_step)
        self._async_wait()
        if force:
            self._dcp_save(self._states(curr_step), checkpoint_id)
            self.rep.saved(os.path.basename(checkpoint_id))
        elif self.async_mode == "async":
            self._pending_name = os.path.basename(checkpoint_id)
            self.async_future = self._async_save(self._states(curr_step), checkpoint_id)
        else:
            self._dcp_save(self._states(curr_step), checkpoint_id)
            self.rep.saved(os.path.basename(checkpoint_id))
        self._purge_stale_checkpoints()

    def load(self, step=-1):
        import torch.distributed._shard.checkpoint as dcp
        if not os.path.isdir(self.folder):
            return False
        if step != -1 and not os.path.isdir(create_checkpoint_id(self.folder, step)):
            return False
        if step == -1:
            found = discover(self.folder)
            if found is None:
                return False
            step = int(found.split("-")[1])
        self.rep.data["discovered"] = f"step-{step}"
        sd = dcp_state(SPEC, objects(step), step, self.world, self.rank, empty=True)
        dcp.load_state_dict(sd, dcp.FileSystemReader(create_checkpoint_id(self.folder, step)))
        self.rep.data["checked"] = dcp_check(sd, SPEC, objects(step), step, f"load of step-{step}")
        self.rep.data["loaded"] = f"step-{step}"
        return step

    def _purge_stale_checkpoints(self):
        if self.keep_latest_k > 0:
            discovered = []
            for filename in os.listdir(self.folder):
                match = re.search(r"step-(\d+)", filename)
                path = os.path.join(self.folder, filename)
                discovered.append((int(match.group(1)), path))
            discovered.sort()
            for _, path in discovered[: -1 * self.keep_latest_k]:
                shutil.rmtree(path, ignore_errors=True)
                self.rep.removed(os.path.basename(path))

    def close(self):
        self._async_wait()


def rank_main(rank, world, cfg, rep):
    folder = cfg["run"]
    # the job's dump folder and its checkpoint folder exist (an async first save would
    # otherwise race its own purge's listdir against the writer thread's makedirs: a
    # torchtitan matter, not a filesystem one)
    os.makedirs(folder, exist_ok=True)
    mgr = CheckpointManager(folder, cfg["interval"], cfg["keep_latest_k"],
                            cfg.get("async_mode", "disabled"), rank, world, rep)
    step = mgr.load(step=-1)
    step = step if step else 0
    steps = cfg["steps"]
    while step < steps:
        step += 1
        time.sleep(cfg.get("step_time", 0.05))
        mgr.save(step, force=(step == steps))
    mgr.close()
