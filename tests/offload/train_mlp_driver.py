"""Runs train_mlp for the engine-level tests of the NVMe tier (tests/offload/*_test.py) and for
bench/offload/engine_step.py: the command line at 1 or N ranks, a wall-clock limit that kills
mpirun and every rank (a hang is a failure, never a stuck CTest), scratch directories, a small tmpfs
mounted for a test, and a memory cgroup that caps a run's RAM (cgroup v2 memory.max, or v1
memory.limit_in_bytes where the memory controller is still on v1).

A test that lacks a privilege (mount, cgroups) exits with SKIP_CODE and says why; CMake registers
the tests with SKIP_RETURN_CODE 77.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP_CODE = 77

MPI_ENVIRONMENT = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


def add_arguments(parser):
    """The arguments every test takes: where train_mlp and mpirun are."""
    parser.add_argument("--train-mlp", required=True, help="the train_mlp binary")
    parser.add_argument("--mpirun", default="mpirun", help="MPI's launcher (CMake's MPIEXEC)")


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP_CODE)


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


class Result:
    def __init__(self, command, returncode, stdout, stderr, seconds, timed_out):
        self.command, self.returncode = command, returncode
        self.stdout, self.stderr = stdout, stderr
        self.seconds, self.timed_out = seconds, timed_out

    @property
    def output(self):
        return self.stdout + self.stderr

    def describe(self):
        tail = "\n".join(self.output.strip().splitlines()[-15:])
        status = "timed out" if self.timed_out else f"exit code {self.returncode}"
        return f"$ {' '.join(map(str, self.command))}\n({status}, {self.seconds:.1f} s)\n{tail}"


class TrainMlp:
    """train_mlp at `ranks` ranks: the binary itself at 1 rank (MPI starts as a singleton), mpirun
    above that."""

    def __init__(self, binary, mpirun="mpirun", timeout_s=300):
        self.binary, self.mpirun, self.timeout_s = str(binary), mpirun, timeout_s

    def command(self, args, ranks=1):
        args = [str(a) for a in args]
        if ranks == 1:
            return [self.binary] + args
        return [self.mpirun, "-np", str(ranks), "--oversubscribe", self.binary] + args

    def start(self, args, ranks=1, cgroup=None, env=None):
        environment = dict(os.environ, **MPI_ENVIRONMENT, **(env or {}))
        # A stuck collective aborts the job rather than the test's own limit killing it.
        environment.setdefault("ZERO_TIMEOUT_S", "60")
        join = cgroup.join if cgroup else None
        return subprocess.Popen(self.command(args, ranks), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=environment,
                                start_new_session=True, preexec_fn=join)

    def run(self, args, ranks=1, cgroup=None, env=None, timeout_s=None):
        command = self.command(args, ranks)
        start = time.monotonic()
        process = self.start(args, ranks, cgroup, env)
        timed_out = False
        try:
            stdout, stderr = process.communicate(timeout=timeout_s or self.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(process)
            stdout, stderr = process.communicate()
        return Result(command, process.returncode, stdout, stderr, time.monotonic() - start,
                      timed_out)


def wait_until(condition, timeout_s, interval_s=0.05):
    """Polls condition() until it is true (returns True) or timeout_s passed (returns False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True


def session_members(session):
    """The pids of the live processes in `session` (its leader's pid)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)"
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            members.append(int(entry))
    return members


def kill_group(process, sig=signal.SIGKILL):
    """Signals everything the run started and, for SIGKILL, waits until it is gone. mpirun puts
    each rank in a process group of its own, but they stay in the session that start() made, so
    the session is what is signalled: a rank that outlives mpirun would hold its swap directory's
    lock (and the pipes) for seconds."""
    for pid in [process.pid] + session_members(process.pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    if sig == signal.SIGKILL:
        wait_until(lambda: process.poll() is not None and not session_members(process.pid), 10)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def swap_files(directory):
    """Every file and directory train_mlp's tiers left under <directory>/zero_swap."""
    root = Path(directory) / "zero_swap"
    return sorted(str(p.relative_to(directory)) for p in root.rglob("*")) + (
        ["zero_swap"] if root.exists() else [])


def file_system_type(path):
    """The type of the file system `path` is on (ext4, tmpfs, ...), from /proc/self/mounts."""
    path, best, kind = os.path.realpath(path), "", "unknown"
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            _, mount_point, fs_type = line.split()[:3]
            mount_point = mount_point.replace("\\040", " ")
            inside = path == mount_point or path.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= len(best):
                best, kind = mount_point, fs_type
    return kind


class ScratchDir:
    """A fresh directory under `base` (default: the temporary directory), removed at the end."""

    def __init__(self, base=None, prefix="zero_engine_test."):
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


class Tmpfs:
    """A tmpfs of `size` (mount's syntax: 4m) on a scratch directory, read-only if asked; the
    reason it could not be mounted (not root, no mount namespace) in `refused`."""

    def __init__(self, size, read_only=False):
        self.size, self.read_only, self.refused = size, read_only, None
        self.scratch = ScratchDir(prefix="zero_tmpfs.")
        self.path, self.mounted = self.scratch.path, False

    def __enter__(self):
        options = f"size={self.size}" + (",ro" if self.read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(self.path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            self.refused = (f"cannot mount a tmpfs ({options}): {done.stderr.strip()}; "
                            "this test needs root (CAP_SYS_ADMIN)")
        else:
            self.mounted = True
        return self

    def __exit__(self, *exc):
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        self.scratch.__exit__()


class MemoryCgroup:
    """A child of this process's memory cgroup whose processes may use at most `limit` bytes
    (page cache included, as the kernel counts it). Pass it to TrainMlp.run(cgroup=...): the run
    joins it before exec, and mpirun's ranks inherit it. `refused` says why none could be made."""

    def __init__(self, limit, name=None):
        self.limit, self.refused, self.path, self.version = limit, None, None, None
        self.name = name or f"zero_ram_cap_{os.getpid()}"

    def __enter__(self):
        parent, self.version = self._parent()
        if parent is None:
            self.refused = ("no memory cgroup to nest under: neither cgroup v2 with the memory "
                            "controller nor a v1 memory hierarchy is mounted in /sys/fs/cgroup")
            return self
        path = parent / self.name
        try:
            path.mkdir()
            self.path = path
            if self.version == 2:
                if not (path / "memory.max").exists():
                    # v2 lets a cgroup that holds processes give no controller to its children.
                    (parent / "cgroup.subtree_control").write_text("+memory")
                (path / "memory.max").write_text(str(self.limit))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
            else:
                (path / "memory.limit_in_bytes").write_text(str(self.limit))
                # With swap accounting, RAM + swap; equal to the limit: no swapping out instead
                # of the OOM kill (memsw may not be below the RAM limit, so it is set second).
                if (path / "memory.memsw.limit_in_bytes").exists():
                    (path / "memory.memsw.limit_in_bytes").write_text(str(self.limit))
        except OSError as e:
            self.refused = f"cannot make a memory cgroup under {parent}: {e} (this needs root)"
        return self

    def __exit__(self, *exc):
        if self.path:
            for _ in range(50):  # the killed processes leave the cgroup a moment after they die
                try:
                    self.path.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)

    def join(self):
        """In the child, before exec."""
        with open(self.path / "cgroup.procs", "w") as f:
            f.write(str(os.getpid()))

    def peak_bytes(self):
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def oom_kills(self):
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except OSError:
            pass
        return None

    @staticmethod
    def _parent():
        v2_root = Path("/sys/fs/cgroup")
        v1_roots = [Path("/sys/fs/cgroup/memory")]
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hierarchy, controllers, relative = line.split(":", 2)
            relative = relative.lstrip("/")
            if hierarchy == "0" and controllers == "":
                for root in (v2_root, v2_root / "unified"):
                    here = root / relative
                    controllers_file = here / "cgroup.controllers"
                    if (controllers_file.exists()
                            and "memory" in controllers_file.read_text().split()):
                        return here, 2
            elif "memory" in controllers.split(","):
                for root in v1_roots:
                    if (root / relative / "memory.limit_in_bytes").exists():
                        return root / relative, 1
        return None, None
