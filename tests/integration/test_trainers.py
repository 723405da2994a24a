"""Trainer conformance (issue 14): the checkpoint code of the trainers users run, emulated
file operation for file operation from the seeds (tests/integration/trainers/, one module
per trainer; torch 1.13, 2 gloo ranks), against a real default mount (no --commit-idle):

  OLMo-core Checkpointer + CheckpointerCallback, sync and async     trainers/olmo_core.py
  OLMo-core safetensors distributed format (model/ then optim/)     trainers/olmo_safetensors.py
  torchtitan CheckpointManager, sync and async, keep_latest_k       trainers/torchtitan.py
  RecIS Saver / CheckpointManager (checkpoint index, max_keep)      trainers/recis.py
  DeepSpeed save_checkpoint / load_checkpoint (`latest` file)       trainers/deepspeed.py
  Hugging Face Trainer (checkpoint-N, save_total_limit, best)       trainers/hf.py

Each run saves over several steps, lists, finds its latest checkpoint with its own logic,
loads it (values compared in the ranks), prunes with its own rule, and is resumed by a new
process that discovers the latest checkpoint and continues. Asserted: the trainer never
sees an error; every step it finished and kept is committed with every file it wrote;
`latest` agrees with the trainer's own discovery; the run directory lists what the
trainer's own pruning kept. Variants: the trainer's pruning off and ckptfs's retention
preset doing it; straggler ranks; a fresh mount with an empty cache on the same bucket
resumes from the right step.
"""
import os
import shutil
import sys
import time

import pytest

from ckptfs_testlib import CkptfsMount, PYTHON, torch_available
from trainers import olmo_core
from trainers.harness import (RunLog, check_latest, check_listing, check_steps, run_phase)


@pytest.fixture(scope="module", autouse=True)
def _need_torch():
    if not torch_available():
        pytest.skip(f"torch is not importable by {PYTHON}: the trainer emulations need torch 1.13")


def is_olmo_step(name):
    return name.startswith("step")


# ----------------------------------------------------------------------------- OLMo-core

OLMO = dict(save_interval=4, ephemeral_save_interval=2, step_time=0.1)


@pytest.mark.timeout_s(240)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_olmo_core_checkpointer(ckptfs, mode):
    """save_interval=4, ephemeral_save_interval=2, remove=ephemeral_only; process 1 trains
    steps 1-7 (step0 pre-train, 2 ephemeral, 4, 6 ephemeral, 2 removed, 7 final), process 2
    resumes from step7 and trains to 11 (8, 10 ephemeral, 6 removed, 11 final)."""
    m = ckptfs
    run_rel = "olmo/run1"
    run = m.path(run_rel)
    cfg = dict(OLMO, run=run, max_steps=7)
    cfg["async"] = mode == "async"
    log = RunLog()
    p1 = log.add(run_phase("olmo_core", cfg))
    assert p1.loaded is None
    assert "step7" in p1.saved
    if mode == "sync":      # async: the removal waits for the pending save, maybe past the end
        assert "step2" in p1.removed
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_olmo_step)
    found = olmo_core.discover(run)
    assert found == "step7"
    check_latest(m, run_rel, found)

    p2 = log.add(run_phase("olmo_core", dict(cfg, max_steps=11)))
    assert (p2.discovered, p2.loaded) == ("step7", "step7")
    assert p2.rank(0)["checked"] > 0 and p2.rank(1)["checked"] > 0
    assert "step11" in p2.saved
    if mode == "sync":
        assert "step6" in p2.removed
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_olmo_step)
    check_latest(m, run_rel, olmo_core.discover(run))
    assert olmo_core.discover(run) == "step11"


# ----------------------------------------------------------------------------- helpers

def olmo_cfg(run, **kw):
    return dict(OLMO, run=run, **kw)


def is_prefixed(prefix):
    return lambda name: name.startswith(prefix)


def expect_retention_mount(make_ckptfs, preset, *more):
    """A mount with `--retention PRESET`."""
    return make_ckptfs("--retention", preset, *more)


def latest_file(m, run_rel):
    p = m.path(run_rel, "latest")
    assert not os.path.islink(p), f"{run_rel}/latest is still the virtual link -> {os.readlink(p)}"
    with open(p) as f:
        return f.read()


# ----------------------------------------------------------------------------- OLMo-core safetensors

@pytest.mark.timeout_s(240)
def test_olmo_safetensors_save_model_and_optim_state(ckptfs):
    """save_model_and_optim_state(RUN/step<N>): model/ then optim/, metadata.json in each
    (markers inside the step, not directly in it); every 2 steps, the user's loop keeps 2;
    resumed by a new process (model and optimizer loaded per rank, model unsharded)."""
    from trainers import olmo_safetensors as ost
    m = ckptfs
    run_rel = "ost/run1"
    run = m.path(run_rel)
    cfg = dict(run=run, interval=2, keep=2, steps=5)
    log = RunLog()
    p1 = log.add(run_phase("olmo_safetensors", cfg))
    assert p1.saved == ["step2", "step4"] and p1.loaded is None
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("step"))
    check_latest(m, run_rel, ost.discover(run))
    p2 = log.add(run_phase("olmo_safetensors", dict(cfg, steps=8)))
    assert (p2.discovered, p2.loaded) == ("step4", "step4")
    assert p2.saved == ["step6", "step8"] and p2.removed == ["step2", "step4"]
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("step"))
    check_latest(m, run_rel, ost.discover(run))
    assert ost.discover(run) == "step8"


# ----------------------------------------------------------------------------- torchtitan

TT = dict(interval=2, keep_latest_k=2, step_time=0.05)


@pytest.mark.timeout_s(240)
@pytest.mark.parametrize("async_mode", ["disabled", "async"])
def test_torchtitan_checkpoint_manager(ckptfs, async_mode):
    """interval 2, keep_latest_k 2 (its purge lists the folder and parses a step number out
    of EVERY entry), 7 steps (the last one forced, sync), resumed to 10 (load scans for
    .metadata)."""
    from trainers import torchtitan as tt
    m = ckptfs
    run_rel = "tt/outputs/checkpoint"
    folder = m.path(run_rel)
    cfg = dict(TT, run=folder, steps=7, async_mode=async_mode)
    log = RunLog()
    p1 = log.add(run_phase("torchtitan", cfg))
    assert p1.saved == ["step-2", "step-4", "step-6", "step-7"] and p1.loaded is None
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("step-"))
    assert log.alive == ["step-6", "step-7"]
    check_latest(m, run_rel, tt.discover(folder))
    p2 = log.add(run_phase("torchtitan", dict(cfg, steps=10)))
    assert (p2.discovered, p2.loaded) == ("step-7", "step-7")
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("step-"))
    assert log.alive == ["step-8", "step-10"]
    check_latest(m, run_rel, tt.discover(folder))


# ----------------------------------------------------------------------------- RecIS

@pytest.mark.timeout_s(240)
def test_recis_saver(ckptfs):
    """save_interval 2, max_keep 2, shards = 2 ranks (io_state_<shard>.pt, io_state_count),
    the run's `checkpoint` index appended and rewritten; resumed by a new process (which
    never removes the first process's checkpoints)."""
    from trainers import recis
    m = ckptfs
    run_rel = "recis/out"
    out = m.path(run_rel)
    cfg = dict(run=out, save_interval=2, max_keep=2, steps=7)
    log = RunLog()
    p1 = log.add(run_phase("recis", cfg))
    assert p1.saved == ["ckpt_2", "ckpt_4", "ckpt_6"] and p1.removed == ["ckpt_2"]
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("ckpt_"))
    assert recis.index_lines(out) == ["ckpt_4", "ckpt_6"]
    check_latest(m, run_rel, recis.discover(out))
    p2 = log.add(run_phase("recis", dict(cfg, steps=6)))
    assert (p2.discovered, p2.loaded) == ("ckpt_6", "ckpt_6")
    assert p2.saved == ["ckpt_8", "ckpt_10", "ckpt_12"] and p2.removed == ["ckpt_8"]
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("ckpt_"))
    assert recis.index_lines(out) == ["ckpt_4", "ckpt_6", "ckpt_10", "ckpt_12"]
    check_latest(m, run_rel, recis.discover(out))


# ----------------------------------------------------------------------------- DeepSpeed

@pytest.mark.timeout_s(240)
def test_deepspeed_save_and_load_checkpoint(ckptfs):
    """global_step<N>/ with mp_rank_00_model_states.pt (rank 0) and one
    zero_pp_rank_<r>_mp_rank_00_optim_states.pt per rank, zero_to_fp32.py copied into the
    run, rank 0's open("latest", "w") after its own files (no barrier before it): the step
    commits on `latest`; load_checkpoint reads `latest`."""
    from trainers import deepspeed as ds
    m = ckptfs
    run_rel = "ds/run1"
    run = m.path(run_rel)
    cfg = dict(run=run, save_interval=2, steps=5)
    log = RunLog()
    p1 = log.add(run_phase("deepspeed", cfg))
    assert p1.saved == ["global_step2", "global_step4"] and p1.loaded is None
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("global_step"))
    assert latest_file(m, run_rel) == "global_step4" == ds.discover(run)
    p2 = log.add(run_phase("deepspeed", dict(cfg, steps=8)))
    assert (p2.discovered, p2.loaded) == ("global_step4", "global_step4")
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("global_step"))
    assert latest_file(m, run_rel) == "global_step8"


@pytest.mark.timeout_s(240)
@pytest.mark.parametrize("tag_format", [
    "global_step{}",
    "step{}",
])
def test_deepspeed_latest_over_a_committed_step(ckptfs, tag_format):
    """A run whose newest step is committed before DeepSpeed writes its first `latest` (the
    first save with save_latest=False, committed with `ckptfs commit`); DeepSpeed resumed
    with an explicit tag then saves with open("latest", "w"), which must create a real file
    (not EISDIR by following a virtual link to the step directory), which names the new
    step. A DeepSpeed run shows no virtual link at all: by its default tags
    (global_step<N>), or with a custom tag (step<N>) by its zero_to_fp32.py and
    mp_rank_00_model_states.pt."""
    from trainers import deepspeed as ds
    m = ckptfs
    run_rel = "ds/run2"
    run = m.path(run_rel)
    first, second = tag_format.format(2), tag_format.format(4)
    log = RunLog()
    log.add(run_phase("deepspeed", dict(run=run, save_interval=2, steps=2, save_latest=False,
                                        tag_format=tag_format)))
    r = m.commit(f"{run_rel}/{first}")
    assert r.returncode == 0, r.stderr
    link = m.path(run_rel, "latest")
    assert not os.path.lexists(link), "a DeepSpeed run shows a virtual `latest`"
    log.add(run_phase("deepspeed", dict(run=run, save_interval=2, steps=4, load_tag=first,
                                        tag_format=tag_format)))
    assert latest_file(m, run_rel) == second == ds.discover(run)
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed(tag_format[:-2]))


@pytest.mark.timeout_s(60)
def test_rm_latest_turns_the_virtual_link_off_for_the_run(ckptfs):
    """`rm latest` of the virtual link succeeds; later commits in that run bring no link
    back; other runs keep theirs."""
    m = ckptfs
    for run in ("plain/a", "plain/b"):
        for s in (1, 2):
            os.makedirs(m.path(run, f"step{s}"))
            with open(m.path(run, f"step{s}", "model.pt"), "wb") as f:
                f.write(bytes([s]) * 100)
            if s == 1:
                assert m.commit(f"{run}/step1").returncode == 0
                check_latest(m, run, "step1")
                if run == "plain/a":
                    os.remove(m.path(run, "latest"))
                    assert not os.path.lexists(m.path(run, "latest"))
            else:
                assert m.commit(f"{run}/step2").returncode == 0
    assert not os.path.lexists(m.path("plain/a", "latest")), "rm latest did not turn the link off"
    check_latest(m, "plain/b", "step2")


# ----------------------------------------------------------------------------- Hugging Face

EVAL = {2: 3.0, 4: 1.0, 6: 2.0, 8: 2.5, 10: 0.5, 12: 0.7}


def hf_cfg(run, **kw):
    return dict(run=run, save_steps=2, eval_losses={str(k): v for k, v in EVAL.items()}, **kw)


@pytest.mark.timeout_s(240)
def test_hf_trainer(ckptfs):
    """checkpoint-<N> every 2 steps (trainer_state.json last, by rank 0), save_total_limit=2
    with the best checkpoint (lowest eval_loss) protected; resumed with
    resume_from_checkpoint=True (get_last_checkpoint) to step 12."""
    from trainers import hf
    m = ckptfs
    run_rel = "hf/out"
    run = m.path(run_rel)
    cfg = hf_cfg(run, save_total_limit=2, max_steps=7)
    log = RunLog()
    p1 = log.add(run_phase("hf", cfg))
    assert p1.saved == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert p1.removed == ["checkpoint-2"]
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("checkpoint-"))
    check_latest(m, run_rel, hf.discover(run))
    p2 = log.add(run_phase("hf", dict(cfg, max_steps=12)))
    assert (p2.discovered, p2.loaded) == ("checkpoint-6", "checkpoint-6")
    assert all(r.get("rng_loaded") for r in p2.ranks)
    # best checkpoint-4 protected at 8 (checkpoint-6 goes), then 10 is best
    assert log.alive == ["checkpoint-10", "checkpoint-12"]
    check_steps(m, run_rel, log)
    check_listing(m, run_rel, log, is_prefixed("checkpoint-"))
    check_latest(m, run_rel, hf.discover(run))


# ----------------------------------------------------------------------------- straggler ranks

LATE = {
    # trainer: (run, cfg, step, the late rank's file, the trigger rank 0 wrote before it)
    "hf": ("hf/late", lambda run: hf_cfg(run, max_steps=2, late_rank_s=1.0, late_at=[2]),
           "checkpoint-2", "rng_state_1.pth", "checkpoint-2/trainer_state.json"),
    "deepspeed": ("ds/late", lambda run: dict(run=run, save_interval=2, steps=2, late_rank_s=1.0,
                                              late_at=[2]),
                  "global_step2", "zero_pp_rank_1_mp_rank_00_optim_states.pt", "latest"),
    "recis": ("recis/late", lambda run: dict(run=run, save_interval=2, max_keep=5, steps=2,
                                             late_rank_s=1.0),
              "ckpt_2", "io_state_1.pt", "checkpoint"),
}


@pytest.mark.timeout_s(180)
@pytest.mark.parametrize("trainer", sorted(LATE))
def test_late_rank_gets_its_file_into_the_step(ckptfs, trainer):
    """Rank 1 writes its per-rank file about 1 s after rank 0 wrote what triggers the commit
    (HF's unsynchronised rng_state_1.pth after trainer_state.json; DeepSpeed's zero file
    after `latest`, which has no barrier before it; RecIS's io_state_1.pt after the
    `checkpoint` index): the rank sees no error and the step commits with its file."""
    m = ckptfs
    run_rel, make_cfg, step, late_file, trigger = LATE[trainer]
    log = RunLog()
    log.add(run_phase(trainer, make_cfg(m.path(run_rel))))
    check_steps(m, run_rel, log)
    t_late = os.stat(m.path(run_rel, step, late_file)).st_mtime
    t_trigger = os.stat(m.path(run_rel, trigger)).st_mtime
    assert t_late - t_trigger >= 0.8, f"{late_file} was not late ({t_late - t_trigger:.2f}s)"


# ----------------------------------------------------------------------------- retention presets

@pytest.mark.timeout_s(300)
def test_retention_preset_olmo_core(make_ckptfs):
    """remove="never" in the trainer, `--retention olmo-core:save_interval=4,ephemeral=2` in
    ckptfs: the steps left are those OLMo-core's default ephemeral_only rule leaves (the
    newest ephemeral checkpoint stays until the next ephemeral one, also across processes;
    the final post-train checkpoint stays)."""
    m = expect_retention_mount(make_ckptfs, "olmo-core:save_interval=4,ephemeral=2")
    run_rel = "olmo/run1"
    run = m.path(run_rel)
    cfg = olmo_cfg(run, max_steps=7, remove="never")
    log = RunLog()
    p1 = log.add(run_phase("olmo_core", cfg))
    assert p1.saved == ["step0", "step2", "step4", "step6", "step7"]
    # remove="never" only stops the cleanup of earlier runs' ephemeral checkpoints: the
    # callback still removes its own superseded ephemeral step2 (after ckptfs did: OLMo-core
    # ignores the FileNotFoundError)
    assert set(p1.removed) <= {"step2"}
    alive = ["step0", "step4", "step6", "step7"]
    check_steps(m, run_rel, log, alive=alive)
    check_listing(m, run_rel, log, is_olmo_step, alive=alive)
    check_latest(m, run_rel, olmo_core.discover(run))
    p2 = log.add(run_phase("olmo_core", dict(cfg, max_steps=11)))
    assert p2.loaded == "step7"
    alive = ["step0", "step4", "step7", "step8", "step10", "step11"]
    check_steps(m, run_rel, log, alive=alive)
    check_listing(m, run_rel, log, is_olmo_step, alive=alive)
    check_latest(m, run_rel, olmo_core.discover(run))


@pytest.mark.timeout_s(300)
def test_retention_preset_torchtitan(make_ckptfs):
    """keep_latest_k=0 in the trainer, `--retention torchtitan:keep_latest_k=2` in ckptfs."""
    from trainers import torchtitan as tt
    m = expect_retention_mount(make_ckptfs, "torchtitan:keep_latest_k=2")
    run_rel = "tt/outputs/checkpoint"
    folder = m.path(run_rel)
    cfg = dict(TT, run=folder, steps=7, keep_latest_k=0)
    log = RunLog()
    p1 = log.add(run_phase("torchtitan", cfg))
    assert p1.removed == []
    check_steps(m, run_rel, log, alive=["step-6", "step-7"])
    check_listing(m, run_rel, log, is_prefixed("step-"), alive=["step-6", "step-7"])
    p2 = log.add(run_phase("torchtitan", dict(cfg, steps=10)))
    assert p2.loaded == "step-7"
    check_steps(m, run_rel, log, alive=["step-8", "step-10"])
    check_listing(m, run_rel, log, is_prefixed("step-"), alive=["step-8", "step-10"])
    check_latest(m, run_rel, tt.discover(folder))


@pytest.mark.timeout_s(300)
def test_retention_preset_hf(make_ckptfs):
    """save_total_limit=None in the trainer, `--retention hf:save_total_limit=2` in ckptfs:
    the same checkpoints as Trainer._rotate_checkpoints keeps, the best one (from
    trainer_state.json's best_model_checkpoint) protected."""
    from trainers import hf
    m = expect_retention_mount(make_ckptfs, "hf:save_total_limit=2")
    run_rel = "hf/out"
    run = m.path(run_rel)
    cfg = hf_cfg(run, max_steps=7)
    log = RunLog()

    def expected(upto):
        kept, best, best_loss = [], None, None
        for s in range(2, upto + 1, 2):
            if best_loss is None or EVAL[s] < best_loss:
                best, best_loss = f"checkpoint-{s}", EVAL[s]
            kept = hf.rotation_keeps(kept + [f"checkpoint-{s}"], best, 2)
        return kept

    p1 = log.add(run_phase("hf", cfg))
    assert p1.removed == []
    check_steps(m, run_rel, log, alive=expected(7))
    check_listing(m, run_rel, log, is_prefixed("checkpoint-"), alive=expected(7))
    p2 = log.add(run_phase("hf", dict(cfg, max_steps=12)))
    assert p2.loaded == "checkpoint-6"
    check_steps(m, run_rel, log, alive=expected(12))
    check_listing(m, run_rel, log, is_prefixed("checkpoint-"), alive=expected(12))
    check_latest(m, run_rel, hf.discover(run))


@pytest.mark.timeout_s(300)
def test_retention_preset_recis(make_ckptfs):
    """max_keep effectively off in the trainer, `--retention recis:max_keep=2` in ckptfs:
    like RecIS's Saver, only the newest process's checkpoints count."""
    from trainers import recis
    m = expect_retention_mount(make_ckptfs, "recis:max_keep=2")
    run_rel = "recis/out"
    out = m.path(run_rel)
    cfg = dict(run=out, save_interval=2, max_keep=1000, steps=7)
    log = RunLog()
    p1 = log.add(run_phase("recis", cfg))
    assert p1.removed == []
    check_steps(m, run_rel, log, alive=["ckpt_4", "ckpt_6"])
    check_listing(m, run_rel, log, is_prefixed("ckpt_"), alive=["ckpt_4", "ckpt_6"])
    check_latest(m, run_rel, recis.discover(out))
    p2 = log.add(run_phase("recis", dict(cfg, steps=6)))
    assert p2.loaded == "ckpt_6"
    alive = ["ckpt_4", "ckpt_6", "ckpt_10", "ckpt_12"]
    check_steps(m, run_rel, log, alive=alive)
    check_listing(m, run_rel, log, is_prefixed("ckpt_"), alive=alive)
    check_latest(m, run_rel, recis.discover(out))


# ----------------------------------------------------------------------------- a fresh mount of the bucket

@pytest.fixture(scope="module")
def s3_module():
    from s3rver_fixture import ACCESS_KEY, SECRET_KEY, S3rver, s3rver_available
    if not s3rver_available():
        if os.environ.get("CI"):
            pytest.fail("s3rver is not installed (packaging/install-deps.sh installs it)")
        pytest.skip("s3rver is not installed: run packaging/install-deps.sh")
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_SESSION_TOKEN", "AWS_PROFILE")}
    os.environ["AWS_ACCESS_KEY_ID"] = ACCESS_KEY
    os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET_KEY
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.pop("AWS_PROFILE", None)
    server = S3rver().start()
    yield server
    server.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


REMOTE = {
    # trainer: (run, first process's cfg, second process's cfg, the step it must resume from)
    "olmo_core": ("olmo/run1", lambda run: olmo_cfg(run, max_steps=5),
                  lambda run: olmo_cfg(run, max_steps=7), "step5"),
    "olmo_safetensors": ("ost/run1", lambda run: dict(run=run, interval=2, keep=2, steps=4),
                         lambda run: dict(run=run, interval=2, keep=2, steps=6), "step4"),
    "torchtitan": ("tt/outputs/checkpoint", lambda run: dict(TT, run=run, steps=4),
                   lambda run: dict(TT, run=run, steps=6), "step-4"),
    "recis": ("recis/out", lambda run: dict(run=run, save_interval=2, max_keep=2, steps=4),
              lambda run: dict(run=run, save_interval=2, max_keep=2, steps=2), "ckpt_4"),
    "deepspeed": ("ds/run1", lambda run: dict(run=run, save_interval=2, steps=4),
                  lambda run: dict(run=run, save_interval=2, steps=6), "global_step4"),
    # checkpoint-5 and -10 (name order is not number order), each better than the last, so
    # that the rotation after checkpoint-15 must remove checkpoint-5, the oldest by mtime
    "hf": ("hf/out", lambda run: dict(run=run, save_steps=5, save_total_limit=2, max_steps=10,
                                      eval_losses=HF_REMOTE_EVAL),
           lambda run: dict(run=run, save_steps=5, save_total_limit=2, max_steps=15,
                            eval_losses=HF_REMOTE_EVAL), "checkpoint-10"),
}
HF_REMOTE_EVAL = {"5": 3.0, "10": 2.0, "15": 1.0}


@pytest.mark.timeout_s(300)
@pytest.mark.parametrize("trainer", sorted(REMOTE))
def test_fresh_mount_of_the_bucket_resumes_from_the_right_step(make_ckptfs, s3_module, trainer):
    """Save, wait until every kept step is persisted and the run-level files (DeepSpeed's
    `latest`, RecIS's `checkpoint` index) are in the bucket, unmount; a new mount with an
    empty cache on the same bucket: the trainer, unchanged, resumes from the step it saved
    last and goes on saving."""
    from test_remote import wait_persisted
    from trainers.harness import wait_committed
    s3 = s3_module
    prefix = f"trainers/{trainer}"
    args = ("--remote", f"s3://{s3.bucket}/{prefix}", "--s3-endpoint", s3.endpoint)
    run_rel, cfg1, cfg2, resume_from = REMOTE[trainer]
    a = make_ckptfs(*args)
    log = RunLog()
    p1 = log.add(run_phase(trainer, cfg1(a.path(run_rel))))
    assert p1.saved[-1] == resume_from
    check_steps(a, run_rel, log)
    for step in log.alive:
        wait_persisted(a, f"{run_rel}/{step}")
    for name in sorted(log.run_files):
        key = f"{prefix}/{run_rel}/{name}"
        with open(a.path(run_rel, name), "rb") as f:
            local = f.read()
        deadline = time.monotonic() + 30
        while True:
            if key in s3.keys(f"{prefix}/{run_rel}/") and s3.get(key) == local:
                break
            assert time.monotonic() < deadline, f"run-level file {run_rel}/{name} never reached the bucket"
            time.sleep(0.5)
    a.umount()

    # the new machine: the same mountpoint (trainers keep absolute paths, e.g. HF's
    # best_model_checkpoint), an empty cache
    shutil.rmtree(a.cache)
    os.makedirs(a.cache)
    b = CkptfsMount(args, base=a.base)
    try:
        b.start()
        for step in log.alive:
            wait_committed(b, f"{run_rel}/{step}")
        if "latest" not in log.run_files:
            check_latest(b, run_rel, resume_from)
        p2 = log.add(run_phase(trainer, cfg2(b.path(run_rel))))
        assert (p2.discovered, p2.loaded) == (resume_from, resume_from), \
            f"resumed from {p2.loaded!r} (discovered {p2.discovered!r}), not {resume_from}"
        assert p2.saved, "the resumed trainer saved nothing"
        check_steps(b, run_rel, log)
        check_latest_or_file(b, run_rel, log)
        if trainer == "hf":
            # HF's rotation orders by directory mtime: the imported directories
            # must keep the order they were saved in (their mtimes travel in the
            # commit objects).
            assert p2.removed == ["checkpoint-5"], p2.removed
    except BaseException:
        sys.stdout.write(f"\n---- ckptfs log for the fresh mount ----\n{b.daemon_log()}\n")
        raise
    finally:
        b.close()


def check_latest_or_file(m, run_rel, log):
    """`latest` is the trainer's own file when it writes one, else the virtual link to the
    newest step the trainer kept."""
    if "latest" in log.run_files:
        with open(m.path(run_rel, "latest")) as f:
            assert f.read().strip() == log.alive[-1]
    else:
        check_latest(m, run_rel, log.alive[-1])
