"""docs/recipes.md, executed: every recipe that can run here (torch 1.13, no GPU) runs as
written against a real mount. Code blocks are taken from the page itself at test time
(`/ckpt` becomes the test mount; the names a recipe assumes, such as `state_dict`,
`step`, `state` and `model`, are defined by trainers/snippet.py), so a recipe that
changes is tested as it now reads, and one that disappears fails here with a message.

  DCP (torch 1.13 form, 2 gloo ranks)          commits on .metadata, `latest`, loads back
  plain torch.save (temp dir + rename)         commits on the rename, loads through latest
  the writer library variant                   with CKPTFS_WRITER_LIB (meson test sets it)
  per-run retention preset (setfattr)          user.ckptfs.retention on a run directory
  Hugging Face: an on_save commit callback after the barrier (also with a straggler
                                               rank) and the older --commit-idle recipe
  OLMo-core safetensors: model/.full/model.safetensors under the model's own names
  Megatron-LM's latest_checkpointed_iteration.txt commits the iteration it names
  "Checking what you have"                     the four commands, as written

The trainer recipes themselves (torchtitan, OLMo-core, HF, DeepSpeed, RecIS unchanged on a
default mount, and the retention presets) are test_trainers.py's subject.
Not runnable here: the torch >= 2.2 `dcp.save(..., checkpoint_id=...)` line (torch 1.13
only; its 1.13 form on the same page runs), real DeepSpeed / transformers / torchtitan /
OLMo-core packages (emulated in test_trainers.py), `zero_to_fp32.py`, CUDA sources.
"""
import json
import os
import re
import subprocess
import time

import pytest

from ckptfs_testlib import PYTHON, REPO, get_xattr, torch_available
from trainers.harness import RunLog, check_steps, run_phase

RECIPES = os.path.join(REPO, "docs", "recipes.md")


@pytest.fixture(scope="module", autouse=True)
def _need_torch():
    if not torch_available():
        pytest.skip(f"torch is not importable by {PYTHON}: the recipes need torch 1.13")


# ----------------------------------------------------------------------------- the page

def doc_blocks():
    """[(section title, language, code)] of docs/recipes.md."""
    with open(RECIPES) as f:
        text = f.read()
    out = []
    for sec in re.split(r"^## ", text, flags=re.M):
        title = sec.splitlines()[0].strip() if sec.strip() else ""
        for m in re.finditer(r"```(\w*)\n(.*?)```", sec, re.S):
            out.append((title, m.group(1), m.group(2)))
    return out


def doc_text():
    with open(RECIPES) as f:
        return f.read()


def block(section, contains):
    for title, lang, code in doc_blocks():
        if section.lower() in title.lower() and contains in code:
            return code
    pytest.fail(f"docs/recipes.md: no code block containing {contains!r} in section {section!r} "
                "any more; update test_recipes.py to the recipe as it now reads")


def on_mount(code, m):
    return code.replace("/ckpt", m.mnt)


def commented_torch113(code):
    """The `# torch 1.13:` form of the DCP recipe, uncommented."""
    lines = code.splitlines()
    for i, ln in enumerate(lines):
        if ln.lstrip().startswith("# torch 1.13:"):
            first = ln.split("# torch 1.13:", 1)[1].strip()
            rest = []
            for nxt in lines[i + 1:]:
                s = nxt.lstrip()
                if not s.startswith("#"):
                    break
                rest.append(s[1:].strip())
            return "\n".join([first] + rest) + "\n"
    pytest.fail("docs/recipes.md: the DCP recipe has no `# torch 1.13:` form any more")


# ----------------------------------------------------------------------------- DCP

@pytest.mark.timeout_s(240)
def test_dcp_torch113_recipe(make_ckptfs):
    """The page's mount line with its plain retention rules, then the DCP recipe's torch
    1.13 form in 2 gloo ranks for steps 100 and 200: each commits on .metadata, `latest`
    follows, and DCP loads the step back (through `latest` too)."""
    mount_line = block("Recipes", "ckptfs mount /ckpt")
    m_keep = re.search(r"--keep-last (\d+) --keep-every (\d+)", mount_line)
    assert m_keep, f"the mount line changed: {mount_line!r}"
    m = make_ckptfs("--keep-last", m_keep.group(1), "--keep-every", m_keep.group(2))
    code = commented_torch113(block("DCP", "save_state_dict"))
    for step in (100, 200):
        run_phase("snippet", dict(run=m.path("run1"), kind="dcp113", step=step, world=2,
                                  code=[on_mount(code, m)]))
        m.wait_state(f"run1/step{step}", "committed", timeout=30)
        assert os.readlink(m.path("run1", "latest")) == f"step{step}"
    p = run_phase("snippet", dict(run=m.path("run1"), kind="dcp113", step=200, world=2, code=[],
                                  verify="dcp113", load=m.path("run1", "latest")))
    assert p.rank(0)["checked"] > 0 and p.rank(1)["checked"] > 0
    assert sorted(n for n in os.listdir(m.path("run1"))) == ["step100", "step200"]


# ----------------------------------------------------------------------------- plain torch.save

@pytest.mark.timeout_s(180)
def test_plain_torch_save_recipe(ckptfs):
    """The temporary directory + rename recipe: the rename commits step100 atomically."""
    m = ckptfs
    code = block("Plain", "os.rename(tmp")
    run_phase("snippet", dict(run=m.path("run1"), kind="plain", step=100, world=1,
                              code=[on_mount(code, m)], verify="plain",
                              load=m.path("run1", "step100", "model.pt")))
    m.wait_state("run1/step100", "committed", timeout=30)
    assert os.readlink(m.path("run1", "latest")) == "step100"
    assert sorted(os.listdir(m.path("run1"))) == ["step100"]
    p = run_phase("snippet", dict(run=m.path("run1"), kind="plain", step=100, world=1, code=[],
                                  verify="plain", load=m.path("run1", "latest", "model.pt")))
    assert p.rank(0)["checked"] == 2


@pytest.mark.timeout_s(180)
def test_writer_library_recipe(ckptfs):
    """The writer-library variant: Writer + save_safetensors into the temporary directory,
    then the same rename; the files carry user.ckptfs.crc32c."""
    lib = os.environ.get("CKPTFS_WRITER_LIB")
    if not lib:
        pytest.skip("CKPTFS_WRITER_LIB is not set (meson test sets it)")
    m = ckptfs
    plain = block("Plain", "os.rename(tmp")
    writer = block("Plain", "from ckptfs.writer import")
    prelude = "\n".join(ln for ln in plain.splitlines() if not ln.startswith("torch.save")
                        and not ln.startswith("os.rename")) + "\n"
    rename = "\n".join(ln for ln in plain.splitlines() if ln.startswith("os.rename")) + "\n"
    run_phase("snippet", dict(run=m.path("run1"), kind="plain", step=7, world=1,
                              python_path=os.path.join(REPO, "python"),
                              code=[on_mount(prelude, m), on_mount(writer, m), on_mount(rename, m)],
                              verify="plain", load=m.path("run1", "step7", "model.pt")))
    m.wait_state("run1/step7", "committed", timeout=30)
    assert sorted(os.listdir(m.path("run1", "step7"))) == ["model.pt", "model.safetensors"]
    for name in ("model.pt", "model.safetensors"):
        assert get_xattr(m.path("run1", "step7", name), "user.ckptfs.crc32c"), name
    from trainers.common import load_safetensors
    w = load_safetensors(m.path("run1", "step7", "model.safetensors"))
    assert sorted(w) == ["bias", "weight"]


# ----------------------------------------------------------------------------- retention

@pytest.mark.timeout_s(120)
def test_per_run_retention_preset_xattr(ckptfs):
    """`setfattr -n user.ckptfs.retention -v PRESET /ckpt/run1`, as written, with
    torchtitan:keep_latest_k=2: committing step-1..4 leaves step-3 and step-4."""
    m = ckptfs
    text = doc_text()
    cmd = re.search(r"`(setfattr -n user\.ckptfs\.retention -v PRESET /ckpt/run1)`", text)
    if not cmd:
        pytest.skip("docs/recipes.md shows no per-run retention preset command")
    os.makedirs(m.path("run1"))
    line = on_mount(cmd.group(1), m).replace("PRESET", "torchtitan:keep_latest_k=2").split()
    r = subprocess.run(line, capture_output=True, text=True)
    assert r.returncode == 0, f"setfattr user.ckptfs.retention refused: {r.stderr.strip()}"
    for s in range(1, 5):
        os.makedirs(m.path("run1", f"step-{s}"))
        with open(m.path("run1", f"step-{s}", "model.pt"), "wb") as f:
            f.write(bytes([s]) * 64)
        assert m.commit(f"run1/step-{s}").returncode == 0
    deadline = time.monotonic() + 15
    while sorted(os.listdir(m.path("run1"))) != ["step-3", "step-4"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(os.listdir(m.path("run1"))) == ["step-3", "step-4"]


# ----------------------------------------------------------------------------- Hugging Face

EVAL = {"2": 3.0, "4": 1.0, "6": 2.0}


@pytest.mark.timeout_s(180)
def test_hf_commit_callback_after_the_barrier(ckptfs):
    """An on_save callback as docs/recipes.md now says: every rank waits at the barrier,
    then rank 0 sets user.ckptfs.commit on checkpoint-N; ranks on time."""
    assert "commit only after the ranks' barrier" in " ".join(doc_text().split()), \
        "docs/recipes.md no longer says when a commit callback may commit"
    m = ckptfs
    log = RunLog()
    log.add(run_phase("hf", dict(run=m.path("hf/out"), save_steps=2, max_steps=4, eval_losses=EVAL,
                                 commit_callback=True)))
    check_steps(m, "hf/out", log)


@pytest.mark.timeout_s(180)
def test_hf_commit_callback_after_the_barrier_with_a_straggler_rank(ckptfs):
    """The callback after the barrier while rank 1 writes rng_state_1.pth a second after
    trainer_state.json: an explicit commit does not settle for quiet, so only the barrier
    keeps rank 1's file in the step: no error for rank 1, and the step committed with it."""
    m = ckptfs
    log = RunLog()
    log.add(run_phase("hf", dict(run=m.path("hf/out"), save_steps=2, max_steps=4, eval_losses=EVAL,
                                 commit_callback=True, late_rank_s=1.0, late_at=[2])))
    check_steps(m, "hf/out", log)


@pytest.mark.timeout_s(180)
def test_hf_older_commit_idle_recipe_still_works(make_ckptfs):
    """The old `--commit-idle 60` recipe (2 s here, so the test does not wait a minute)."""
    m = make_ckptfs("--commit-idle", "2")
    log = RunLog()
    log.add(run_phase("hf", dict(run=m.path("hf/out"), save_steps=2, max_steps=4, eval_losses=EVAL,
                                 save_total_limit=2)))
    check_steps(m, "hf/out", log)


# ----------------------------------------------------------------------------- OLMo-core safetensors

@pytest.mark.timeout_s(180)
def test_olmo_safetensors_full_model_safetensors(ckptfs):
    """"`model/.full/model.safetensors` then has the model under its own parameter names":
    after save_model_and_optim_state(step2), it holds every model tensor, full, by name."""
    text = doc_text()
    if "model/.full/model.safetensors" not in text:
        pytest.skip("docs/recipes.md makes no claim about model/.full/model.safetensors")
    from trainers import olmo_safetensors as ost
    from trainers.common import SafeOpen
    m = ckptfs
    log = RunLog()
    log.add(run_phase("olmo_safetensors", dict(run=m.path("ost/run1"), interval=2, steps=2)))
    check_steps(m, "ost/run1", log)
    path = m.path("ost/run1/step2/model/.full/model.safetensors")
    assert os.path.exists(path), f"no {path}: {os.listdir(m.path('ost/run1/step2/model/.full'))}"
    # compare with the full values, computed independently of ckptfs (in a torch process)
    r = subprocess.run([PYTHON, "-c", (
        "import sys, json; sys.path.insert(0, %r)\n"
        "from trainers import olmo_safetensors as ost\n"
        "from trainers.common import SafeOpen, equal\n"
        "f = SafeOpen(%r)\n"
        "bad = [k for k, s in ost.MODEL.items() if not equal(f.get_tensor(k).reshape(-1), "
        "ost.full_value(k, s, 2))]\n"
        "print(json.dumps({'keys': sorted(f.keys()), 'bad': bad}))\n") % (os.path.dirname(__file__), path)],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["keys"] == sorted(ost.MODEL), out
    assert out["bad"] == [], out
    del SafeOpen


# ----------------------------------------------------------------------------- Megatron-LM

@pytest.mark.timeout_s(60)
def test_megatron_tracker_file_commits_the_iteration(ckptfs):
    """"The same holds for ... Megatron-LM's `latest_checkpointed_iteration.txt`": Megatron
    writes iter_<7 digits>/mp_rank_<tp>/model_optim_rng.pt per rank, then rank 0 writes the
    tracker file with the iteration number (open "w")."""
    text = doc_text()
    if "latest_checkpointed_iteration.txt" not in text:
        pytest.skip("docs/recipes.md makes no claim about Megatron-LM")
    m = ckptfs
    for it in (10, 20):
        for tp in (0, 1):
            d = m.path("megatron", f"iter_{it:07d}", f"mp_rank_{tp:02d}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "model_optim_rng.pt"), "wb") as f:
                f.write(bytes([it, tp]) * 500)
        with open(m.path("megatron", "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(it))
        m.wait_state(f"megatron/iter_{it:07d}", "committed", timeout=30)
        assert m.xattr(f"megatron/iter_{it:07d}", "user.ckptfs.files") == "2"
    with open(m.path("megatron", "latest_checkpointed_iteration.txt")) as f:
        assert f.read() == "20"


# ----------------------------------------------------------------------------- checking

@pytest.mark.timeout_s(60)
def test_checking_what_you_have_commands(ckptfs):
    """The four commands of "Checking what you have", as written, on a committed step100."""
    m = ckptfs
    os.makedirs(m.path("run1", "step100.tmp"))
    with open(m.path("run1", "step100.tmp", "model.pt"), "wb") as f:
        f.write(b"w" * 4096)
    os.rename(m.path("run1", "step100.tmp"), m.path("run1", "step100"))
    m.wait_state("run1/step100", "committed", timeout=30)
    cmds = [ln.split("#")[0].strip() for ln in block("Checking", "ckptfs status").splitlines()]
    cmds = [c for c in cmds if c]
    assert len(cmds) == 4, cmds
    from ckptfs_testlib import CKPTFS_BIN
    out = {}
    for c in cmds:
        c = on_mount(c, m)
        if c.startswith("ckptfs "):
            c = CKPTFS_BIN + c[len("ckptfs"):]
        r = subprocess.run(c, shell=True, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"`{c}` exited {r.returncode}: {r.stderr}"
        out[c.split()[0]] = r.stdout
    assert "run1" in out[CKPTFS_BIN] and "committed" in out[CKPTFS_BIN], out[CKPTFS_BIN]
    assert 'user.ckptfs.state="committed"' in out["getfattr"], out["getfattr"]
    assert out["readlink"].strip() == "step100"
    assert all(json.loads(ln) for ln in out["tail"].splitlines())
