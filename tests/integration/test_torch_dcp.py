"""A real 4-rank PyTorch DCP save (torch 1.13 ``torch.distributed._shard.checkpoint``,
ShardedTensors over gloo) into a ckptfs mount: the step commits through the .metadata
marker (which DCP writes as .metadata.tmp and renames), `latest` points at it, the bytes
equal those of the same save into a plain directory, and DCP loads it back exactly."""
import os
import subprocess

import pytest

from ckptfs_testlib import HERE, PYTHON, torch_available, tree_digest

DCP_SAVE = os.path.join(HERE, "dcp_save.py")


@pytest.fixture(scope="module", autouse=True)
def _need_torch():
    if not torch_available():
        pytest.skip(f"torch is not importable by {PYTHON}: the DCP test needs torch 1.13+")


def dcp(mode, path, *extra, world=4):
    r = subprocess.run([PYTHON, DCP_SAVE, mode, path, "--world-size", str(world), *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"dcp_save.py {mode} {path} failed:\n{r.stderr[-4000:]}"


def total_size(d):
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(d) for f in fs)


def count_files(d):
    return sum(len(fs) for _, _, fs in os.walk(d))


@pytest.mark.timeout_s(600)
def test_dcp_save_commit_load(ckptfs, outside_dir):
    m = ckptfs
    variants = [("step100", ()), ("step200", ("--single-file-per-rank",))]
    for name, extra in variants:
        dst = m.path("run1", name)
        dcp("save", dst, *extra)
        m.wait_state(f"run1/{name}", "committed", timeout=60)
        assert m.latest("run1") == name
        plain = os.path.join(outside_dir, "run1", name)
        dcp("save", plain, *extra)
        # same file set, byte-identical
        got, want = tree_digest(dst), tree_digest(plain)
        assert sorted(got) == sorted(want), "file sets differ from a plain-directory save"
        assert got == want, "bytes differ from a plain-directory save"
        assert ".metadata" in got and ".metadata.tmp" not in os.listdir(dst)
        assert m.xattr(f"run1/{name}", "user.ckptfs.files") == str(count_files(plain))
        assert m.xattr(f"run1/{name}", "user.ckptfs.bytes") == str(total_size(plain))
        st = m.step_status(f"run1/{name}")
        assert st and st["state"] == "committed" and st["step"] == int(name[4:])
    # load back through the mount, 4 ranks, exact comparison (done inside dcp_save.py)
    dcp("load", m.path("run1", "step100"))
    dcp("load", m.path("run1", "latest"))       # step200, through the virtual symlink
    # committed checkpoint files are sealed
    with pytest.raises(OSError) as ei:
        open(m.path("run1", "step100", ".metadata"), "r+b")
    assert ei.value.errno == 30  # EROFS
    # survives a restart byte-identical
    before = tree_digest(m.path("run1"))
    m.restart()
    assert tree_digest(m.path("run1")) == before
    dcp("load", m.path("run1", "step200"))
