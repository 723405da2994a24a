"""Runs code blocks of docs/recipes.md as written (test_recipes.py extracts them), in every
rank of a trainer process, with the names the recipe assumes already defined:

  kind "dcp113": state_dict (a DCP state dict: ShardedTensors over the ranks, plain
                 tensors, objects; common.dcp_state), FileSystemWriter (torch 1.13's)
  kind "plain":  state (a dict of tensors), model (a torch.nn.Linear)
and step, os, torch. cfg["code"] is a list of snippets executed in order in one
namespace; cfg["verify"] = "dcp113" loads the checkpoint back with torch 1.13 and
compares every value; "plain" torch.loads cfg["load"] and compares.
"""
import os
import sys

from .common import check, dcp_check, dcp_state, equal, value

SPEC = {"model.w": ((8, 4), "sharded"), "model.b": ((4,), "plain"), "optim.step": ((), "plain")}
OBJECTS = {"extra.epoch": 3}


def plain_state(step):
    return {"model.w": value("model.w", (8, 4), step), "model.b": value("model.b", (4,), step)}


def rank_main(rank, world, cfg, rep):
    import torch
    step = cfg["step"]
    if cfg.get("python_path"):
        sys.path.insert(0, cfg["python_path"])
    ns = {"__name__": "__recipe__", "os": os, "torch": torch, "step": step}
    kind = cfg["kind"]
    if kind == "dcp113":
        from torch.distributed._shard.checkpoint import FileSystemWriter
        ns["FileSystemWriter"] = FileSystemWriter
        ns["state_dict"] = dcp_state(SPEC, OBJECTS, step, world, rank)
    else:
        ns["state"] = plain_state(step)
        model = torch.nn.Linear(4, 3)
        with torch.no_grad():
            model.weight.copy_(value("linear.weight", (3, 4), step))
            model.bias.copy_(value("linear.bias", (3,), step))
        ns["model"] = model
    for code in cfg["code"]:
        exec(compile(code, f"docs/recipes.md ({kind})", "exec"), ns)
    verify = cfg.get("verify")
    if verify == "dcp113":
        import torch.distributed._shard.checkpoint as dcp
        sd = dcp_state(SPEC, OBJECTS, step, world, rank, empty=True)
        dcp.load_state_dict(sd, dcp.FileSystemReader(cfg["load"]))
        rep.data["checked"] = dcp_check(sd, SPEC, OBJECTS, step, f"load of {cfg['load']}")
    elif verify == "plain":
        got = torch.load(cfg["load"])
        want = plain_state(step)
        for k, v in want.items():
            check(equal(got[k], v), f"load of {cfg['load']}: {k} differs")
        rep.data["checked"] = len(want)
