"""CPU threads on a shared machine: the default thread count follows the CPUs this process may use (its affinity
mask and its cgroup's CPU quota, v1 and v2, read from fake cgroup trees here), and a run whose training rate
falls far below its own after warm-up says once that the CPU looks shared (the rule: tests/test_threads.py)."""

import pytest
import torch
from test_train_loop import corpus, main, overrides  # noqa: F401  (the module's corpus fixture)

from avey_b.utils import device


def cgroup_v2(tmp_path, cpu_max, path="/user.slice/job", parent_cpu_max=None):
    (tmp_path / "proc_cgroup").write_text(f"0::{path}\n")
    leaf = tmp_path / "fs" / path.lstrip("/")
    leaf.mkdir(parents=True)
    if cpu_max is not None:
        (leaf / "cpu.max").write_text(cpu_max + "\n")
    if parent_cpu_max is not None:
        (leaf.parent / "cpu.max").write_text(parent_cpu_max + "\n")
    return dict(cgroup_root=tmp_path / "fs", proc_cgroup=tmp_path / "proc_cgroup")


def cgroup_v1(tmp_path, quota, period=100000, path="/docker/abc", controllers="cpu,cpuacct"):
    tmp_path.mkdir()
    (tmp_path / "proc_cgroup").write_text(f"12:memory:{path}\n4:{controllers}:{path}\n0::/\n")
    leaf = tmp_path / "fs" / controllers / path.lstrip("/")
    leaf.mkdir(parents=True)
    (leaf / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (leaf / "cpu.cfs_period_us").write_text(f"{period}\n")
    return dict(cgroup_root=tmp_path / "fs", proc_cgroup=tmp_path / "proc_cgroup")


@pytest.mark.parametrize("cpu_max, parent, expected", [
    ("200000 100000", None, 2),      # --cpus=2 on an 8-CPU host
    ("150000 100000", None, 1),      # 1.5 CPUs: a second thread would be throttled every period
    ("50000 100000", None, 1),       # under one CPU: still one thread
    ("max 100000", None, 8),         # no quota
    ("max 100000", "300000 100000", 3),  # the quota of an ancestor cgroup binds too
    (None, None, 8),                 # no cpu.max (the controller is not enabled)
])
def test_the_cgroup_v2_cpu_quota_caps_the_usable_cpus(tmp_path, cpu_max, parent, expected):
    paths = cgroup_v2(tmp_path, cpu_max, parent_cpu_max=parent)
    assert device.usable_cpus(affinity=set(range(8)), **paths) == expected


def test_the_cgroup_v1_cfs_quota_caps_the_usable_cpus(tmp_path):
    assert device.usable_cpus(affinity=set(range(8)), **cgroup_v1(tmp_path / "a", 300000)) == 3
    assert device.usable_cpus(affinity=set(range(8)), **cgroup_v1(tmp_path / "b", -1)) == 8
    assert device.usable_cpus(affinity=set(range(8)), **cgroup_v1(tmp_path / "c", 100000, controllers="cpu")) == 1


def test_inside_a_container_the_mount_root_is_the_containers_cgroup(tmp_path):
    # /proc/self/cgroup names the host's path, which is not mounted in the container: the root's file counts
    (tmp_path / "proc_cgroup").write_text("0::/kubepods/pod1/ctr\n")
    (tmp_path / "fs").mkdir()
    (tmp_path / "fs" / "cpu.max").write_text("100000 100000\n")
    assert device.cgroup_cpu_quota(tmp_path / "fs", tmp_path / "proc_cgroup") == 1.0
    assert device.usable_cpus(affinity={0, 1, 2, 3}, cgroup_root=tmp_path / "fs",
                              proc_cgroup=tmp_path / "proc_cgroup") == 1


def test_the_affinity_mask_caps_the_usable_cpus_and_no_cgroup_means_no_quota(tmp_path):
    missing = dict(cgroup_root=tmp_path / "none", proc_cgroup=tmp_path / "none" / "cgroup")
    assert device.cgroup_cpu_quota(**missing) is None
    assert device.usable_cpus(affinity={3}, **missing) == 1
    assert device.usable_cpus(affinity={0, 2, 5}, **cgroup_v2(tmp_path, "400000 100000")) == 3


def test_the_default_thread_count_is_capped_at_the_usable_cpus(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(device, "usable_cpus", lambda: 1)
        assert device.set_cpu_threads(None, pytorch_default=4) == 1 == torch.get_num_threads()
        monkeypatch.setattr(device, "usable_cpus", lambda: 8)  # never more than PyTorch's own default
        assert device.set_cpu_threads(None, pytorch_default=2) == 2
        torch.set_num_threads(1)  # what an earlier piece of work tuned it to (auto): each starts afresh
        assert device.set_cpu_threads(None, pytorch_default=2) == 2
        assert device.set_cpu_threads(3) == 3  # train.threads wins
        torch.set_num_threads(4)
        monkeypatch.setenv("OMP_NUM_THREADS", "4")  # and so does the user's environment
        monkeypatch.setattr(device, "usable_cpus", lambda: 1)
        assert device.set_cpu_threads(None) == 4
    finally:
        torch.set_num_threads(before)


def test_the_training_loop_says_it_once_on_a_cpu_run_with_several_threads(corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    from avey_b.training import pretrain
    from avey_b.utils.shared_cpu import SharedCpuWatch

    seen = []

    class SlowAfterTwoSteps(SharedCpuWatch):  # the rule itself: tests/test_threads.py
        def add(self, work, seconds, shape=None):
            seen.append((work, seconds))
            return (1000.0, 100.0) if len(seen) == 2 else None

    monkeypatch.setattr("avey_b.utils.shared_cpu.SharedCpuWatch", SlowAfterTwoSteps)
    # a run on two threads, as far as the loop knows (two busy threads on this shared test machine would be slow)
    monkeypatch.setattr(pretrain, "set_cpu_threads", lambda requested: torch.set_num_threads(requested) or 2)
    assert main(overrides(corpus, tmp_path / "two", steps=4)) == 0
    out = capsys.readouterr().out
    assert out.count("the CPU looks shared") == 1 and "--resume train.threads=1" in out
    assert len(seen) == 4 and all(w > 0 and s > 0 for w, s in seen)  # every step's tokens and time, not log lines
    monkeypatch.setattr(pretrain, "set_cpu_threads", lambda requested: torch.set_num_threads(requested) or 1)
    assert main(overrides(corpus, tmp_path / "one", steps=4)) == 0  # one thread: nothing to suggest
    assert "the CPU looks shared" not in capsys.readouterr().out
