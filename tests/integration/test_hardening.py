"""Issue 15's hardening, through a real mount and the real command-line tools: the cache
directory is private, /.ckptfs control files show other users only what they could look up,
bad options are refused with clear messages, committed files keep their contents, times and
xattrs, and recursive commands over a run directory succeed.
"""
import errno
import os
import shutil
import stat
import subprocess

import pytest

from ckptfs_testlib import read_file, run_cli, write_file

NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


def as_nobody(*cmd):
    return subprocess.run([*NOBODY, *cmd], capture_output=True, text=True, timeout=30)


def commit_step(m, run, mode=0o755):
    os.makedirs(m.path(run), exist_ok=True)
    os.chmod(m.path(run), mode)
    step = m.path(run, "step100")
    os.mkdir(step)
    write_file(os.path.join(step, "shard0"), b"tensor bytes")
    write_file(os.path.join(step, "metadata.json"), b"{}")
    m.wait_state(step, "committed")
    return step


def test_cache_directory_and_its_files_are_private(make_ckptfs):
    m = make_ckptfs(start=False)
    os.chmod(m.cache, 0o755)  # as `mkdir` under a usual umask leaves it
    m.start()
    commit_step(m, "run")
    os.setxattr(m.path("run"), "user.secret", b"hunter2")
    # others may only pass through, to the writer socket
    assert stat.S_IMODE(os.stat(m.cache).st_mode) == 0o711
    assert "was mode 0755; now 0711" in "".join(m.history)
    r = as_nobody("ls", m.cache)
    assert r.returncode != 0 and "Permission denied" in r.stderr
    loose = []
    for root, dirs, files in os.walk(m.cache):
        for name in dirs:
            p = os.path.join(root, name)
            if os.stat(p).st_mode & 0o077:
                loose.append(f"{p} {oct(os.stat(p).st_mode)}")
        for name in files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
                loose.append(f"{p} {oct(st.st_mode)}")
    assert loose == [], loose
    r = as_nobody("cat", os.path.join(m.cache, "events.jsonl"))
    assert r.returncode != 0 and "Permission denied" in r.stderr
    r = as_nobody("ls", os.path.join(m.cache, "manifest"))
    assert r.returncode != 0 and "Permission denied" in r.stderr


def test_cache_directory_of_another_user_is_refused(make_ckptfs):
    m = make_ckptfs(start=False)
    os.chown(m.cache, 65534, 65534)
    r = run_cli("mount", m.mnt, "--cache", m.cache)
    assert r.returncode == 1, r.stderr
    assert "belongs to uid 65534" in r.stderr
    assert not os.path.ismount(m.mnt)


def test_control_files_show_other_users_only_what_they_may_look_up(make_ckptfs):
    m = make_ckptfs()
    commit_step(m, "public")
    commit_step(m, "private", mode=0o700)
    status = os.path.join(m.mnt, ".ckptfs", "status.json")
    events = os.path.join(m.mnt, ".ckptfs", "events")
    # root sees both
    assert "private/step100" in read_file(status).decode()
    assert "private/step100" in read_file(events).decode()
    for path in (status, events):
        r = as_nobody("cat", path)
        assert r.returncode == 0, r.stderr
        assert "public/step100" in r.stdout
        assert "private" not in r.stdout, r.stdout


def test_empty_cache_value_is_refused(make_ckptfs):
    m = make_ckptfs(start=False)
    r = run_cli("mount", m.mnt, "--cache", "")
    assert r.returncode == 2
    assert "--cache takes a directory, not an empty string" in r.stderr
    assert not os.path.ismount(m.mnt)


def test_non_empty_mountpoint_needs_nonempty(make_ckptfs):
    m = make_ckptfs(start=False)
    write_file(os.path.join(m.mnt, "left-over"), b"x")
    r = run_cli("mount", m.mnt, "--cache", m.cache)
    assert r.returncode == 1
    assert "is not empty" in r.stderr and "--nonempty" in r.stderr
    assert not os.path.ismount(m.mnt)
    m.start(["--nonempty"])
    assert "left-over" not in os.listdir(m.mnt)  # hidden by the mount, not gone
    m.umount()
    assert os.listdir(m.mnt) == ["left-over"]


def test_s3_endpoint_password_is_not_echoed(make_ckptfs):
    m = make_ckptfs(start=False)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="s3cr3t-key")
    r = run_cli("mount", m.mnt, "--cache", m.cache, "--remote", "s3://bucket/run",
                "--s3-endpoint", "http://alice:pa55word@127.0.0.1:9", env=env)
    assert r.returncode != 0
    assert "user name or password" in r.stderr
    assert "pa55word" not in r.stderr and "alice" not in r.stderr, r.stderr
    assert not os.path.ismount(m.mnt)


def test_writer_socket_never_replaces_a_file(make_ckptfs):
    m = make_ckptfs(start=False)
    victim = os.path.join(m.base, "notes.txt")
    write_file(victim, b"keep me")
    r = run_cli("mount", m.mnt, "--cache", m.cache, "--writer-socket", victim)
    assert r.returncode == 1
    assert "is not a socket" in r.stderr
    assert read_file(victim) == b"keep me"
    # a stale socket (a daemon killed before it could remove it) is replaced
    sock = os.path.join(m.base, "w.sock")
    m.start(["--writer-socket", sock])
    m.kill9()
    assert stat.S_ISSOCK(os.lstat(sock).st_mode)
    m.restart()
    assert stat.S_ISSOCK(os.lstat(sock).st_mode)


def test_unknown_ckptfs_xattrs_and_run_rules_on_steps_are_refused(make_ckptfs):
    m = make_ckptfs()
    step = commit_step(m, "run")
    r = subprocess.run(["setfattr", "-n", "user.ckptfs.keep_lats", "-v", "3", m.path("run")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "Invalid argument" in r.stderr
    r = subprocess.run(["setfattr", "-n", "user.ckptfs.keep_last", "-v", "3", step],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "Invalid argument" in r.stderr
    reasons = [e.get("error", "") for e in m.events() if e.get("event") == "error"]
    assert any("unknown ckptfs attribute user.ckptfs.keep_lats" in x for x in reasons), reasons
    assert any("set on run directories" in x for x in reasons), reasons
    subprocess.run(["setfattr", "-n", "user.ckptfs.keep_last", "-v", "3", m.path("run")], check=True)
    subprocess.run(["setfattr", "-n", "user.ckptfs.pin", "-v", "1", step], check=True)


def test_committed_files_keep_contents_times_and_xattrs(make_ckptfs):
    m = make_ckptfs()
    step = commit_step(m, "run")
    shard = os.path.join(step, "shard0")
    before = os.stat(shard)
    # touch -h sets the times without opening the file (plain touch opens it for writing first)
    r = subprocess.run(["touch", "-h", shard], capture_output=True, text=True)
    assert r.returncode != 0 and "Read-only file system" in r.stderr
    with pytest.raises(OSError) as e:
        os.utime(shard, (1000, 1000))
    assert e.value.errno == errno.EROFS
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same times: a no-op
    r = subprocess.run(["setfattr", "-n", "user.note", "-v", "x", shard], capture_output=True, text=True)
    assert r.returncode != 0 and "Read-only file system" in r.stderr
    assert os.stat(shard).st_mtime_ns == before.st_mtime_ns
    # owner and mode are access control: they may change
    subprocess.run(["chmod", "0600", shard], check=True)
    subprocess.run(["chown", "65534:65534", shard], check=True)
    st = os.stat(shard)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 65534


@pytest.mark.parametrize("show_latest", [False, True])
def test_recursive_commands_over_a_run_directory_succeed(make_ckptfs, outside_dir, show_latest):
    m = make_ckptfs(*(["--show-latest"] if show_latest else []))
    commit_step(m, "run")
    run = m.path("run")
    assert os.readlink(os.path.join(run, "latest")) == "step100"
    for cmd in (["chown", "-R", "65534:65534", run],
                ["chown", "-h", "65534:65534", os.path.join(run, "latest")],
                ["chmod", "-R", "g+rX", run],
                ["touch", "-h", os.path.join(run, "latest")],
                ["cp", "-a", run, os.path.join(outside_dir, "copy")]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{cmd}: {r.stderr}"
    assert os.lstat(os.path.join(run, "latest")).st_uid == 65534  # follows its run
    assert read_file(os.path.join(outside_dir, "copy", "step100", "shard0")) == b"tensor bytes"
    if shutil.which("rsync"):
        r = subprocess.run(["rsync", "-a", run + "/", os.path.join(outside_dir, "rsync")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
