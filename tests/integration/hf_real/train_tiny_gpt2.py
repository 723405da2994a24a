#!/usr/bin/env python3
"""The real Hugging Face Trainer on a tiny GPT-2, for test_hf_trainer_real.py.

Runs INSIDE the Debian sid chroot (python3-transformers 5.x, python3-accelerate, torch 2.x),
with no downloads: the model is built from a GPT2Config and the data set is synthetic.
The Trainer is used unchanged (its own _save_checkpoint, rotate_checkpoints,
get_last_checkpoint); this script only observes it:

* a TrainerCallback records, at every on_save, the listing of the run directory and of the
  checkpoint just written (names, sizes, directory mtimes: HF's rotation sorts by mtime);
* the step the trainer starts from (on_train_begin) and, with --resume, what
  get_last_checkpoint() picks;
* any exception, with its errno and the path involved.

Each rank writes <report>.rank<N>.json; the process exits 0 only when train() returned.

One process:            python3 train_tiny_gpt2.py --output-dir D --max-steps 30 --report R
Several (gloo, CPU):    python3 -m torch.distributed.run --nproc_per_node 2 train_tiny_gpt2.py ...
Evaluation with a best checkpoint: --best-scores '{"10": 9}' gives eval metric "score" by step
(0 for steps not listed), metric_for_best_model="score", greater_is_better, load_best_model_at_end.
"""
import argparse
import json
import os
import sys
import time
import traceback


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", required=True)
    p.add_argument("--max-steps", type=int, required=True)
    p.add_argument("--save-steps", type=int, default=5)
    p.add_argument("--save-total-limit", type=int, default=2)
    p.add_argument("--resume", action="store_true", help="train(resume_from_checkpoint=True)")
    p.add_argument("--best-scores", default=None,
                   help='JSON {"step": score}: eval every save, load_best_model_at_end')
    p.add_argument("--report", required=True, help="path prefix of the per-rank JSON reports")
    p.add_argument("--save-pause", type=float, default=0.0,
                   help="sleep after each save, so that saves are more than 1 s apart like in "
                        "real runs (HF's rotation then orders checkpoints by directory mtime)")
    return p.parse_args()


def listing(path):
    out = {}
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        return {"<error>": f"{type(e).__name__}: {e}"}
    for n in names:
        p = os.path.join(path, n)
        try:
            st = os.lstat(p)
            out[n] = {"size": st.st_size, "mtime": st.st_mtime,
                      "dir": os.path.isdir(p) and not os.path.islink(p)}
            if out[n]["dir"]:
                # what ckptfs says about a checkpoint while the trainer runs (absent elsewhere)
                try:
                    out[n]["ckptfs_state"] = os.getxattr(p, "user.ckptfs.state").decode()
                except OSError:
                    pass
        except OSError as e:
            out[n] = {"error": f"{type(e).__name__}: {e}"}
    return out


def main():
    a = parse_args()
    rank = int(os.environ.get("RANK", "0"))
    report_path = f"{a.report}.rank{rank}.json"
    report = {"rank": rank, "world_size": int(os.environ.get("WORLD_SIZE", "1")),
              "argv": sys.argv, "ok": False, "saves": [], "t0": time.time()}

    def dump():
        tmp = report_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        os.replace(tmp, report_path)

    try:
        import torch
        import transformers
        from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                                  TrainingArguments)
        from transformers.trainer_utils import get_last_checkpoint

        report["versions"] = {"transformers": transformers.__version__, "torch": torch.__version__}
        torch.manual_seed(0)
        torch.set_num_threads(1)
        seq = 16

        class Synthetic(torch.utils.data.Dataset):
            """Arithmetic progressions mod 128: learnable, deterministic."""

            def __init__(self, n, salt):
                self.n, self.salt = n, salt

            def __len__(self):
                return self.n

            def __getitem__(self, i):
                start = (i * 7 + self.salt) % 128
                stride = 1 + (i % 5)
                ids = torch.tensor([(start + k * stride) % 128 for k in range(seq)])
                return {"input_ids": ids, "labels": ids.clone()}

        config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64)
        model = GPT2LMHeadModel(config)

        best = None if a.best_scores is None else {int(k): float(v)
                                                    for k, v in json.loads(a.best_scores).items()}
        kw = dict(
            output_dir=a.output_dir, use_cpu=True, max_steps=a.max_steps,
            per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=1e-3,
            save_strategy="steps", save_steps=a.save_steps, save_total_limit=a.save_total_limit,
            logging_steps=a.save_steps, report_to="none", disable_tqdm=True, seed=0,
            dataloader_num_workers=0,
        )
        if report["world_size"] > 1:
            # accelerate picks MPI on CPU when torch has it (Debian's does): each rank then
            # believes it is alone. gloo is what torchrun + CPU means.
            kw["ddp_backend"] = "gloo"
        if best is not None:
            kw.update(eval_strategy="steps", eval_steps=a.save_steps, load_best_model_at_end=True,
                      metric_for_best_model="score", greater_is_better=True)
        args = TrainingArguments(**kw)

        trainer_box = []

        def compute_metrics(_pred):
            # deterministic "score" chosen by the test, by the step being evaluated
            return {"score": best.get(trainer_box[0].state.global_step, 0.0)}

        class Observe(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                report["start_step"] = state.global_step
                report["start_best_model_checkpoint"] = state.best_model_checkpoint

            def on_save(self, args, state, control, **kwargs):
                ck = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
                report["saves"].append({
                    "step": state.global_step, "t": time.time(),
                    "best_model_checkpoint": state.best_model_checkpoint,
                    "run_dir": listing(args.output_dir), "checkpoint": listing(ck)})
                dump()
                if a.save_pause > 0:
                    time.sleep(a.save_pause)

        trainer = Trainer(
            model=model, args=args, train_dataset=Synthetic(256, 0),
            eval_dataset=Synthetic(8, 3) if best is not None else None,
            compute_metrics=compute_metrics if best is not None else None,
            callbacks=[Observe()])
        trainer_box.append(trainer)

        if a.resume:
            report["get_last_checkpoint"] = get_last_checkpoint(a.output_dir)
        out = trainer.train(resume_from_checkpoint=True if a.resume else None)
        report["final_step"] = out.global_step
        report["best_model_checkpoint"] = trainer.state.best_model_checkpoint
        report["best_metric"] = trainer.state.best_metric
        report["end_run_dir"] = listing(a.output_dir)
        report["ok"] = True
    except BaseException as e:  # noqa: BLE001 - report everything, then fail
        report["error"] = f"{type(e).__name__}: {e}"
        report["errno"] = getattr(e, "errno", None)
        report["filename"] = getattr(e, "filename", None)
        report["traceback"] = traceback.format_exc()
    report["t1"] = time.time()
    dump()
    if not report["ok"]:
        sys.stderr.write(report["traceback"])
    # the torch.distributed process group (if any) is torn down by interpreter exit
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
