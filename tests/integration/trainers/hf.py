"""The Hugging Face Trainer's checkpointing as transformers 5.12 does it (trainer.py
_save_checkpoint, save_model/_save/save_pretrained, _save_optimizer_and_scheduler,
_save_rng_state, TrainerState.save_to_json, _load_from_checkpoint, _load_rng_state;
trainer_utils.py rotate_checkpoints/sort_checkpoints, get_last_checkpoint), DDP on 2 ranks
with save_strategy="steps", eval at every save, metric_for_best_model="eval_loss".

_save_checkpoint at global step N, RUN = output_dir, CK = RUN/checkpoint-N:
  rank 0 (should_save), save_model -> _save: os.makedirs(CK, exist_ok=True);
    save_pretrained: os.makedirs(CK, exist_ok=True); open(CK/config.json, "w");
    open(CK/generation_config.json, "w"); os.listdir(CK) (stale weight shards, none);
    safetensors save_file -> CK/model.safetensors (metadata {"format": "pt"});
    torch.save(args) -> CK/training_args.bin
  best_global_step set (after the first eval): dist.barrier() (every rank), then
    os.path.exists(RUN/checkpoint-<best>) -> state.best_model_checkpoint = that path
  rank 0: torch.save -> CK/optimizer.pt, CK/scheduler.pt
  every rank, _save_rng_state: os.makedirs(CK, exist_ok=True);
    torch.save -> CK/rng_state_<process_index>.pth   (no barrier: a rank may be late)
  rank 0: open(CK/trainer_state.json, "w") -- LAST
  rank 0: rotate_checkpoints(use_mtime=True): glob RUN/checkpoint-* dirs, sorted by
    os.path.getmtime (by the number when the mtimes span less than 1 s); the newest and
    best_model_checkpoint protected; shutil.rmtree(ignore_errors) of the oldest others
    until max(save_total_limit, protected) are left
Resume (resume_from_checkpoint=True): get_last_checkpoint: os.listdir(RUN), names
  ^checkpoint-(\\d+)$ that are directories, the max; isfile config.json; load_file
  model.safetensors (mmap); trainer_state.json; torch.load optimizer.pt, scheduler.pt;
  rng_state_<rank>.pth if isfile.
"""
import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path

from .common import barrier, check, equal, load_safetensors, safetensors_file_bytes, value

PREFIX_CHECKPOINT_DIR = "checkpoint"
TRAINER_STATE_NAME = "trainer_state.json"
_re_checkpoint = re.compile(r"^" + PREFIX_CHECKPOINT_DIR + r"\-(\d+)$")

MODEL = {"transformer.wte.weight": (16, 8), "transformer.h.0.attn.c_attn.weight": (8, 24),
         "transformer.ln_f.weight": (8,)}


@dataclasses.dataclass
class TrainingArguments:
    output_dir: str
    save_steps: int = 2
    save_total_limit: int = None
    metric_for_best_model: str = "eval_loss"
    greater_is_better: bool = False
    world_size: int = 1
    process_index: int = 0

    @property
    def should_save(self):
        return self.process_index == 0


@dataclasses.dataclass
class TrainerState:
    epoch: float = 0.0
    global_step: int = 0
    max_steps: int = 0
    logging_steps: int = 500
    eval_steps: int = 2
    save_steps: int = 2
    train_batch_size: int = 8
    num_train_epochs: int = 1
    num_input_tokens_seen: int = 0
    total_flos: float = 0.0
    log_history: list = dataclasses.field(default_factory=list)
    best_metric: float = None
    best_global_step: int = None
    best_model_checkpoint: str = None
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    is_hyper_param_search: bool = False
    trial_name: str = None
    trial_params: dict = None
    stateful_callbacks: dict = dataclasses.field(default_factory=dict)

    def save_to_json(self, json_path):
        json_string = json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"
        with open(json_path, "w", encoding="utf-8") as f:
            f.write(json_string)

    @classmethod
    def load_from_json(cls, json_path):
        with open(json_path, encoding="utf-8") as f:
            text = f.read()
        return cls(**json.loads(text))


def get_last_checkpoint(folder):
    content = os.listdir(folder)
    checkpoints = [path for path in content
                   if _re_checkpoint.search(path) is not None and os.path.isdir(os.path.join(folder, path))]
    if len(checkpoints) == 0:
        return None
    return os.path.join(folder, max(checkpoints, key=lambda x: int(_re_checkpoint.search(x).groups()[0])))


def discover(folder):
    if not os.path.isdir(folder):
        return None
    last = get_last_checkpoint(folder)
    return os.path.basename(last) if last else None


def sort_checkpoints(output_dir, use_mtime=False):
    """trainer_utils.sort_checkpoints (without best_model_checkpoint, as rotate calls it)."""
    glob_checkpoints = [str(x) for x in Path(output_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*") if os.path.isdir(x)]
    ordering = []
    for path in glob_checkpoints:
        if use_mtime:
            ordering.append((os.path.getmtime(path), path))
        else:
            m = re.match(f".*{PREFIX_CHECKPOINT_DIR}-([0-9]+)", path)
            if m is not None and m.groups() is not None:
                ordering.append((int(m.groups()[0]), path))
    checkpoints_sorted = sorted(ordering)
    if use_mtime and len(checkpoints_sorted) > 1:
        if checkpoints_sorted[-1][0] - checkpoints_sorted[0][0] < 1.0:
            return sort_checkpoints(output_dir, use_mtime=False)
    return [p for _, p in checkpoints_sorted]


def rotate_checkpoints(output_dir, save_total_limit, best_model_checkpoint, use_mtime, removed):
    """trainer_utils.rotate_checkpoints; `removed` collects what it deletes."""
    if save_total_limit is None or save_total_limit <= 0:
        return
    checkpoints = sort_checkpoints(output_dir, use_mtime)
    if len(checkpoints) <= save_total_limit:
        return
    protected = {checkpoints[-1]}
    if best_model_checkpoint is not None:
        protected.add(str(Path(best_model_checkpoint)))
    num_to_keep = max(save_total_limit, len(protected))
    remaining = len(checkpoints)
    for checkpoint in checkpoints:
        if remaining <= num_to_keep:
            break
        if checkpoint not in protected:
            shutil.rmtree(checkpoint, ignore_errors=True)
            removed(checkpoint)
            remaining -= 1


def rotation_keeps(names, best, limit):
    """What rotate_checkpoints leaves of the checkpoint names `names`, ordered by number
    (a pure model of the rule above, for the expectations of the retention preset)."""
    order = sorted(names, key=lambda n: int(n.split("-")[1]))
    if limit is None or limit <= 0 or len(order) <= limit:
        return order
    protected = {order[-1]} | ({best} if best is not None else set())
    keep, remaining = list(order), len(order)
    for c in order:
        if remaining <= max(limit, len(protected)):
            break
        if c not in protected:
            keep.remove(c)
            remaining -= 1
    return keep


class Trainer:
    def __init__(self, args, rank, world, rep, cfg):
        self.args = args
        self.rank, self.world, self.rep, self.cfg = rank, world, rep, cfg
        self.state = TrainerState(save_steps=args.save_steps, eval_steps=args.save_steps,
                                  is_local_process_zero=rank == 0, is_world_process_zero=rank == 0)

    # -- the model, optimizer, scheduler at the current step
    def model_state(self):
        return {k: value(k, s, self.state.global_step) for k, s in MODEL.items()}

    def optimizer_state(self):
        import torch
        step = self.state.global_step
        return {"state": {i: {"step": torch.tensor(float(step)),
                              "exp_avg": value(k + ".exp_avg", s, step)}
                          for i, (k, s) in enumerate(MODEL.items())},
                "param_groups": [{"lr": 5e-5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
                                  "params": list(range(len(MODEL)))}]}

    def scheduler_state(self):
        step = self.state.global_step
        return {"base_lrs": [5e-5], "last_epoch": step, "_step_count": step + 1, "lr_lambdas": [None]}

    # -- saving
    def _save(self, output_dir):
        import torch
        os.makedirs(output_dir, exist_ok=True)
        # save_pretrained
        os.makedirs(output_dir, exist_ok=True)
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 8, "n_layer": 1,
                  "n_head": 2, "vocab_size": 16, "torch_dtype": "float32", "transformers_version": "4.57.1"}
        with open(os.path.join(output_dir, "config.json"), "w", encoding="utf-8") as w:
            w.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
        with open(os.path.join(output_dir, "generation_config.json"), "w", encoding="utf-8") as w:
            w.write(json.dumps({"bos_token_id": 0, "eos_token_id": 0,
                                "transformers_version": "4.57.1"}, indent=2, sort_keys=True) + "\n")
        for filename in os.listdir(output_dir):       # clean weights of a previous save
            if filename.startswith("model") and filename.endswith(".safetensors") and filename != "model.safetensors":
                os.remove(os.path.join(output_dir, filename))
        with open(os.path.join(output_dir, "model.safetensors"), "wb") as f:
            f.write(safetensors_file_bytes(self.model_state(), metadata={"format": "pt"}))
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))
        for n in ("config.json", "generation_config.json", "model.safetensors", "training_args.bin"):
            self.rep.file(os.path.basename(output_dir), n)

    def _save_checkpoint(self):
        import torch
        checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        run_dir = self.args.output_dir
        output_dir = os.path.join(run_dir, checkpoint_folder)
        if self.args.should_save:
            self._save(output_dir)
        if self.state.best_global_step:
            if self.world > 1:
                barrier()          # so that process 0 has saved the model before the check
            best_dir = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.best_global_step}")
            if os.path.exists(best_dir):
                self.state.best_model_checkpoint = best_dir
        if self.args.should_save:
            torch.save(self.optimizer_state(), os.path.join(output_dir, "optimizer.pt"))
            torch.save(self.scheduler_state(), os.path.join(output_dir, "scheduler.pt"))
            self.rep.file(checkpoint_folder, "optimizer.pt")
            self.rep.file(checkpoint_folder, "scheduler.pt")
        # _save_rng_state, every rank
        rng_states = {"python": ("state", self.state.global_step, self.rank),
                      "cpu": value(f"rng{self.rank}", (4,), self.state.global_step)}
        late = self.cfg.get("late_rank_s", 0.0) if self.rank == self.world - 1 else 0.0
        if late and self.state.global_step in self.cfg.get("late_at", []):
            # a straggler: it gets here after rank 0 wrote trainer_state.json (the test's
            # timing, polled), plus late_rank_s
            marker = os.path.join(output_dir, TRAINER_STATE_NAME)
            deadline = time.monotonic() + 60
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(late)
        os.makedirs(output_dir, exist_ok=True)
        name = "rng_state.pth" if self.args.world_size <= 1 else f"rng_state_{self.args.process_index}.pth"
        torch.save(rng_states, os.path.join(output_dir, name))
        self.rep.file(checkpoint_folder, name)
        if self.args.should_save:
            self.state.save_to_json(os.path.join(output_dir, TRAINER_STATE_NAME))
            self.rep.file(checkpoint_folder, TRAINER_STATE_NAME)
        if self.args.should_save:
            rotate_checkpoints(run_dir, self.args.save_total_limit, self.state.best_model_checkpoint,
                               use_mtime=True, removed=lambda c: self.rep.removed(os.path.basename(c)))
        self.rep.saved(checkpoint_folder)
        # callbacks: on_save
        if self.cfg.get("commit_callback"):
            # docs/recipes.md: an explicit commit is the user's word that the step is
            # complete, so the callback commits after the ranks' barrier
            # (accelerator.wait_for_everyone()), on one rank.
            barrier()
            if self.state.is_world_process_zero:
                os.setxattr(f"{self.args.output_dir}/checkpoint-{self.state.global_step}",
                            "user.ckptfs.commit", b"1")
        if self.cfg.get("score_callback") and self.state.is_world_process_zero:
            loss = self.state.log_history[-1]["eval_loss"]
            os.setxattr(f"{self.args.output_dir}/checkpoint-{self.state.global_step}", "user.ckptfs.score",
                        str(loss).encode())

    # -- evaluation
    def _evaluate(self):
        losses = self.cfg["eval_losses"]
        loss = float(losses[str(self.state.global_step)])
        self.state.log_history.append({"eval_loss": loss, "step": self.state.global_step})
        if self.state.best_metric is None:
            self.state.best_metric = float("inf")
        if loss < self.state.best_metric:
            self.state.best_metric = loss
            self.state.best_global_step = self.state.global_step

    # -- resuming
    def _load_from_checkpoint(self, ckpt):
        import torch
        check(os.path.isfile(os.path.join(ckpt, "config.json")), f"Can't find a valid checkpoint at {ckpt}")
        sd = load_safetensors(os.path.join(ckpt, "model.safetensors"))
        self.state = TrainerState.load_from_json(os.path.join(ckpt, TRAINER_STATE_NAME))
        self.state.is_local_process_zero = self.state.is_world_process_zero = self.rank == 0
        step = self.state.global_step
        check(os.path.basename(ckpt) == f"checkpoint-{step}", f"{ckpt} holds global_step {step}")
        for k, s in MODEL.items():
            check(equal(sd[k], value(k, s, step)), f"load of {ckpt}: {k} differs")
        opt = torch.load(os.path.join(ckpt, "optimizer.pt"))
        for i, (k, s) in enumerate(MODEL.items()):
            check(equal(opt["state"][i]["exp_avg"], value(k + ".exp_avg", s, step)),
                  f"load of {ckpt}: optimizer exp_avg of {k} differs")
        sched = torch.load(os.path.join(ckpt, "scheduler.pt"))
        check(sched["last_epoch"] == step, f"load of {ckpt}: scheduler {sched}")
        rng_file = os.path.join(ckpt, f"rng_state_{self.rank}.pth" if self.world > 1 else "rng_state.pth")
        if os.path.isfile(rng_file):
            rng = torch.load(rng_file)
            check(equal(rng["cpu"], value(f"rng{self.rank}", (4,), step)), f"load of {rng_file}: differs")
            self.rep.data["rng_loaded"] = True
        else:
            self.rep.data["rng_loaded"] = False     # HF only logs this
        self.rep.data["checked"] = len(MODEL) * 2 + 2

    def train(self, max_steps, resume):
        if resume:
            last = get_last_checkpoint(self.args.output_dir) if os.path.isdir(self.args.output_dir) else None
            if last is not None:
                self.rep.data["discovered"] = os.path.basename(last)
                self._load_from_checkpoint(last)
                self.rep.data["loaded"] = os.path.basename(last)
        self.state.max_steps = max_steps
        while self.state.global_step < max_steps:
            barrier()                               # DDP's gradient all-reduce
            time.sleep(self.cfg.get("step_time", 0.05))
            self.state.global_step += 1
            self.state.epoch = self.state.global_step / 100
            if self.state.global_step % self.args.save_steps == 0:
                self._evaluate()
                self._save_checkpoint()
        barrier()


def rank_main(rank, world, cfg, rep):
    args = TrainingArguments(output_dir=cfg["run"], save_steps=cfg["save_steps"],
                             save_total_limit=cfg.get("save_total_limit"), world_size=world,
                             process_index=rank)
    if args.should_save:                            # Trainer.__init__
        os.makedirs(args.output_dir, exist_ok=True)
    Trainer(args, rank, world, rep, cfg).train(cfg["max_steps"], resume=cfg.get("resume", True))
