"""The sandbox of one policy program: run as ``python -I sandbox_supervisor.py CONFIG``
by ``blis_fast.batch.program`` (stdlib only -- it imports nothing of blis-fast, so it starts
in a few tens of milliseconds and a broken install cannot widen the sandbox).

    caller (batch, adapter) ──spawns, own session──► supervisor (this file, the caller's user)
        supervisor: dies with the caller (PR_SET_PDEATHSIG), sets up namespaces and a
        private tmpfs, forks ──► runner (PID 1 of a new PID namespace when available)
            runner: rlimits, drops its user and capabilities, Landlock, seccomp; then
            imports the program and sends what get_policy() returns down a pipe

The program is never a child of the caller, never holds the caller's pipes, and the
supervisor -- not the program -- tells the caller how the runner ended (a header line
on stdout, followed by at most ``max_result + 1`` bytes the runner sent, which the caller
parses as untrusted data).  Every layer is detected at run time; one that the kernel or
the machine lacks is skipped and reported (``layers`` in the header), and
docs/limits.md ("Candidate programs: the sandbox") says what holds without it.

CONFIG is a JSON object: program (the copy to run, inside ``work``), work (the private
folder), timeout_s, memory_bytes, file_bytes, tmpfs_bytes, max_result, parent (the
caller's pid), and optionally off (layers not to set up -- "namespaces", "tmpfs",
"user", "landlock", "seccomp" -- so that tests can check what the others hold).
"""

import ctypes
import json
import os
import platform
import resource
import select
import signal
import struct
import sys
import time

# imported now for the runner: once Landlock is on, only the Python installation is readable
import runpy
import traceback

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long

# <linux/sched.h>, <linux/prctl.h>, <sys/mount.h>
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (0x20000, 0x8000000, 0x10000000,
                                                                        0x20000000, 0x40000000)
CLONE_THREAD = 0x10000
PR_SET_PDEATHSIG, PR_SET_KEEPCAPS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 8, 22, 36, 38
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
CAP_DAC_READ_SEARCH = 2
NOBODY = 65534  # the runner's user and group when the caller is root
OPEN_FILES = 64  # the runner's RLIMIT_NOFILE
EXIT_ORPHANED = 3  # the caller died before the supervisor could tie itself to it

# Landlock (<linux/landlock.h>): file-system rights by ABI version
LL_CREATE_RULESET, LL_ADD_RULE, LL_RESTRICT_SELF = 444, 445, 446  # the same number on every architecture
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1, 2, 4, 8
LL_REFER, LL_TRUNCATE, LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
LL_FILE_RIGHTS = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV  # (rights a file rule may hold)
LL_READ = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
LL_NET_TCP = 1 | 2  # bind, connect (ABI 4)
LL_SCOPE = 1 | 2  # abstract unix sockets, signals (ABI 6)

# seccomp: the syscalls the filter names, per architecture (x86_64: arch/x86/entry/syscalls/
# syscall_64.tbl; aarch64: include/uapi/asm-generic/unistd.h).  aarch64 has no fork/vfork.
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
EPERM, ENOSYS = 1, 38
SYSCALLS = {
    "x86_64": dict(audit_arch=0xC000003E, capset=126, x32_bit=0x40000000, clone=56, clone3=435,
                   kill=62, tgkill=234, rt_sigqueueinfo=129, rt_tgsigqueueinfo=297,
                   denied=dict(fork=57, vfork=58, execve=59, execveat=322, tkill=200, pidfd_send_signal=424,
                               pidfd_getfd=438, ptrace=101, process_vm_readv=310, process_vm_writev=311, kcmp=312,
                               unshare=272, setns=308, mount=165, umount2=166, pivot_root=155, chroot=161,
                               bpf=321, perf_event_open=298, userfaultfd=323, io_uring_setup=425,
                               io_uring_enter=426, io_uring_register=427, keyctl=250, add_key=248,
                               request_key=249)),
    "aarch64": dict(audit_arch=0xC00000B7, capset=91, x32_bit=None, clone=220, clone3=435,
                    kill=129, tgkill=131, rt_sigqueueinfo=138, rt_tgsigqueueinfo=240,
                    denied=dict(execve=221, execveat=281, tkill=130, pidfd_send_signal=424, pidfd_getfd=438,
                                ptrace=117, process_vm_readv=270, process_vm_writev=271, kcmp=272, unshare=97,
                                setns=268, mount=40, umount2=39, pivot_root=41, chroot=51, bpf=280,
                                perf_event_open=241, userfaultfd=282, io_uring_setup=425, io_uring_enter=426,
                                io_uring_register=427, keyctl=219, add_key=217, request_key=218)),
}


def _errno_text() -> str:
    return os.strerror(ctypes.get_errno())


def _prctl(option: int, arg: int = 0) -> bool:
    return LIBC.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)) == 0


# ----------------------------------------------------------------------------- supervisor side


def make_namespaces(layers: dict) -> set:
    """Unshare the PID, network, IPC and mount namespaces (and, not as root, a user
    namespace mapping only the caller's ids); the names of those made."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWNS
    made = {"pid", "net", "ipc", "mount"}
    if uid != 0:
        flags |= CLONE_NEWUSER
        made.add("user")
    if LIBC.unshare(ctypes.c_int(flags)) != 0:
        layers["namespaces"] = {"active": False, "detail": f"unshare refused ({_errno_text()}): the runner is "
                                                            "a plain child under a subreaper"}
        return set()
    if uid != 0:
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError as exc:  # pragma: no cover -- a kernel that allows the namespace allows its map
            layers["namespaces"] = {"active": False, "detail": f"user namespace id map refused ({exc.strerror})"}
            return set()
    layers["namespaces"] = {"active": True, "detail": "+".join(sorted(made)) + ": the runner is PID 1 (its "
                            "descendants die with it), sees no other process, has no network"}
    return made


def private_tmpfs(work: str, program: str, size: int, owner: tuple | None, layers: dict) -> None:
    """Mount a size-bounded tmpfs on ``work`` (in the new mount namespace, so it vanishes
    with the runner) and put the program's copy back inside it."""
    try:
        with open(program, "rb") as f:
            source = f.read()
        if LIBC.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
            raise OSError(ctypes.get_errno(), _errno_text())
        opts = f"size={size},nr_inodes=1024,mode=0700"
        if owner is not None:
            opts += f",uid={owner[0]},gid={owner[1]}"
        if LIBC.mount(b"tmpfs", work.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC),
                      opts.encode()) != 0:
            raise OSError(ctypes.get_errno(), _errno_text())
        with open(program, "wb") as f:
            f.write(source)
        layers["tmpfs"] = {"active": True, "detail": f"its folder is a private {size >> 20} MiB tmpfs"}
    except OSError as exc:
        layers["tmpfs"] = {"active": False, "detail": f"no private tmpfs ({exc.strerror}): its folder is on disk, "
                                                      "each file bounded by the file-size limit"}


def read_all(received: dict, result_fd: int, pid: int, deadline: float, max_result: int) -> tuple[str, int | None]:
    """Read the runner's pipes (``received``: fd -> bytearray, each closed at its end)
    until it ends, sends more than ``max_result`` bytes down ``result_fd``, or the
    deadline passes; (outcome, wait status or None)."""
    fds = dict(received)  # the pipes still open
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # pragma: no cover -- Linux < 5.3: poll its status
        pidfd = None
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", None
            watched = list(fds) + ([pidfd] if pidfd is not None else [])
            ready, _, _ = select.select(watched, [], [], min(remaining, 0.01 if pidfd is None else remaining))
            for fd in ready:
                if fd == pidfd:
                    continue
                data = os.read(fd, 65536)
                if not data:
                    os.close(fd)
                    del fds[fd]
                    continue
                fds[fd] += data
                if fd == result_fd and len(fds[fd]) > max_result:
                    return "oversize", None
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                for fd in list(fds):  # what it wrote before it ended (a descendant may hold the pipe open)
                    os.set_blocking(fd, False)
                    try:
                        while len(fds[fd]) <= max_result and (data := os.read(fd, 65536)):
                            fds[fd] += data
                    except BlockingIOError:
                        pass
                return ("oversize" if len(fds.get(result_fd, b"")) > max_result else "ended"), status
    finally:
        if pidfd is not None:
            os.close(pidfd)


def kill_leftovers(runner: int) -> None:
    """Without a PID namespace: kill the runner's process group, then every process
    reparented to this subreaper, until none is left."""
    try:
        os.killpg(runner, signal.SIGKILL)
    except OSError:
        pass
    me = str(os.getpid())
    for _ in range(1000):
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as f:
                        stat = f.read().decode("ascii", "replace")
                except OSError:
                    continue
                if stat[stat.rfind(")") + 2:].split()[1] == me:
                    children.append(int(entry))
        if not children:
            break
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass


def main() -> None:
    cfg = json.loads(sys.argv[1])
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != cfg["parent"]:  # the caller died before the line above: nobody waits for us
        os._exit(EXIT_ORPHANED)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the runner come to us, not to init
    layers: dict = {}
    off = set(cfg.get("off", ()))
    for name in off:
        layers[name] = {"active": False, "detail": "turned off"}
    namespaces = make_namespaces(layers) if "namespaces" not in off else set()
    user = runner_user() if "user" not in off else None
    work, program = cfg["work"], cfg["program"]
    if user is not None:
        os.chmod(os.path.dirname(work), 0o711)  # the runner's user may pass through to its folder
        os.chown(work, *user[:2])
    if "tmpfs" in off:
        pass
    elif "mount" in namespaces:
        private_tmpfs(work, program, cfg["tmpfs_bytes"], user[:2] if user else None, layers)
    else:
        layers["tmpfs"] = {"active": False, "detail": "no mount namespace: its folder is on disk, each file "
                                                      "bounded by the file-size limit"}
    status_r, status_w = os.pipe()
    result_r, result_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the runner
        try:
            os.close(status_r)
            os.close(result_r)
            runner(cfg, status_w, result_w, user, namespaces, off)
        finally:
            os._exit(70)
    os.close(status_w)
    os.close(result_w)
    fds = {status_r: bytearray(), result_r: bytearray()}
    outcome, status = read_all(fds, result_r, pid, start + cfg["timeout_s"], cfg["max_result"])
    if status is None:
        try:
            os.kill(pid, signal.SIGKILL)  # PID 1 of its namespace: every descendant goes with it
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
    if "pid" not in namespaces:
        kill_leftovers(pid)
    for fd in fds:
        try:
            os.close(fd)
        except OSError:  # (closed at its end)
            pass
    report = fds[status_r][:65536].decode("utf-8", "replace").split("\n", 1)[0]
    try:
        layers.update(json.loads(report))
    except ValueError:
        layers["runner"] = {"active": False, "detail": "the runner ended before reporting its layers"}
    header = {"outcome": outcome, "layers": layers,
              "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
              "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}
    out = sys.stdout.buffer
    out.write(json.dumps(header).encode() + b"\n" + bytes(fds[result_r][: cfg["max_result"] + 1]))
    out.flush()


def runner_user() -> tuple | None:
    """(uid, gid, keep CAP_DAC_READ_SEARCH) the runner drops to when the caller is root
    (None otherwise): nobody, which may not write the caller's files nor signal its
    processes.  It keeps the right to read and search folders when the Python
    installation is not readable by others (e.g. under /root); Landlock then still
    confines its reads."""
    if os.getuid() != 0:
        return None
    paths = [p for p in dict.fromkeys([sys.prefix, sys.base_prefix, *sys.path]) if p and os.path.exists(p)]
    return NOBODY, NOBODY, not all(_open_to_others(p) for p in paths)


def _open_to_others(path: str) -> bool:
    """True if every folder on the way to ``path`` may be searched by any user."""
    path = os.path.realpath(path)
    while True:
        st = os.stat(path)
        if not st.st_mode & 0o001 and os.path.isdir(path):
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


# ----------------------------------------------------------------------------- runner side


def runner(cfg: dict, status_w: int, result_w: int, user: tuple | None, namespaces: set, off: set) -> None:
    """Confine this process, then run the program (never returns)."""
    layers: dict = {name: {"active": False, "detail": "turned off"} for name in off}
    try:
        os.setsid()  # alone in its process group: kill(0, ...) reaches nothing else
        os.chdir(cfg["work"])
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = {0, 1, 2, status_w, result_w}
        for fd in _open_fds():  # every fd of the supervisor but the two pipes (and stdio, now /dev/null)
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        set_limits(cfg, layers)
        if "user" not in off:
            drop_user(user, "user" in namespaces, layers)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the supervisor
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if "landlock" not in off:
            landlock(cfg, layers)
        if "seccomp" not in off:
            seccomp(layers)
    except Exception as exc:  # noqa: BLE001 -- the supervisor reports it; the program never runs
        layers["runner"] = {"active": False, "detail": f"setup failed: {type(exc).__name__}: {exc}"}
        os.write(status_w, json.dumps(layers).encode() + b"\n")
        os._exit(71)
    # (a supervisor that died before PR_SET_PDEATHSIG above makes this write fail: the runner ends)
    os.write(status_w, json.dumps(layers).encode() + b"\n")
    os.close(status_w)
    run_program(cfg["program"], cfg["memory_bytes"], result_w)


def _open_fds() -> list:
    try:
        return [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:  # pragma: no cover -- no /proc: every possible number
        return list(range(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))


def set_limits(cfg: dict, layers: dict) -> None:
    cpu = int(cfg["timeout_s"]) + 2  # a second net behind the supervisor's clock
    for limit, value in ((resource.RLIMIT_AS, cfg["memory_bytes"]), (resource.RLIMIT_FSIZE, cfg["file_bytes"]),
                         (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_NOFILE, OPEN_FILES),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    layers["rlimits"] = {"active": True, "detail": f"memory {cfg['memory_bytes'] >> 20} MiB, files "
                         f"{cfg['file_bytes'] >> 20} MiB each, CPU {cpu} s, {OPEN_FILES} open files, no core dump"}


def capset(keep: int) -> bool:
    """Set the effective and permitted capabilities to ``keep`` (a bit mask), none
    inheritable."""
    header = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0))  # _LINUX_CAPABILITY_VERSION_3
    data = ctypes.create_string_buffer(struct.pack("6I", keep, keep, 0, 0, 0, 0))
    return LIBC.capset(header, data) == 0


def drop_user(user: tuple | None, in_user_namespace: bool, layers: dict) -> None:
    if user is not None:
        uid, gid, keep_read = user
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        _prctl(PR_SET_KEEPCAPS, 1)
        os.setresuid(uid, uid, uid)
        if not capset((1 << CAP_DAC_READ_SEARCH) if keep_read else 0):  # pragma: no cover
            capset(0)
            keep_read = False
        layers["user"] = {"active": True, "detail": f"runs as nobody ({uid}:{gid}), no supplementary groups, "
                          + ("only CAP_DAC_READ_SEARCH (the Python installation is not readable by others)"
                             if keep_read else "no capabilities")}
    elif in_user_namespace:
        capset(0)
        layers["user"] = {"active": True, "detail": "the caller's user in its own user namespace, no capabilities"}
    else:
        layers["user"] = {"active": False, "detail": "the caller's user"}


def landlock(cfg: dict, layers: dict) -> None:
    """Reads: the Python installation, system libraries and the program's folder; writes:
    only that folder; no TCP; no signal out of the domain (as far as the ABI goes)."""
    abi = LIBC.syscall(ctypes.c_long(LL_CREATE_RULESET), None, ctypes.c_long(0), ctypes.c_long(1))
    if abi < 1:
        layers["landlock"] = {"active": False, "detail": f"not available ({_errno_text()})"}
        return
    fs = (1 << 13) - 1 | (LL_REFER if abi >= 2 else 0) | (LL_TRUNCATE if abi >= 3 else 0) | \
        (LL_IOCTL_DEV if abi >= 5 else 0)
    net = LL_NET_TCP if abi >= 4 else 0
    scoped = LL_SCOPE if abi >= 6 else 0
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    attr = ctypes.create_string_buffer(struct.pack("QQQ", fs, net, scoped)[:size])
    ruleset = LIBC.syscall(ctypes.c_long(LL_CREATE_RULESET), attr, ctypes.c_long(size), ctypes.c_long(0))
    if ruleset < 0:
        layers["landlock"] = {"active": False, "detail": f"ruleset refused ({_errno_text()})"}
        return
    readable = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path,
                "/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/etc/ld.so.cache", "/dev/urandom",
                "/proc/self"]
    rules = [(p, LL_READ) for p in dict.fromkeys(readable) if p]
    rules += [("/dev/null", LL_READ | LL_WRITE_FILE | LL_TRUNCATE), (cfg["work"], fs)]
    for path, access in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not os.path.isdir(f"/proc/self/fd/{fd}"):
                access &= LL_FILE_RIGHTS
            rule = ctypes.create_string_buffer(struct.pack("=Qi", access & fs, fd))
            LIBC.syscall(ctypes.c_long(LL_ADD_RULE), ctypes.c_long(ruleset), ctypes.c_long(1), rule, ctypes.c_long(0))
        finally:
            os.close(fd)
    ok = LIBC.syscall(ctypes.c_long(LL_RESTRICT_SELF), ctypes.c_long(ruleset), ctypes.c_long(0)) == 0
    err = _errno_text()
    os.close(ruleset)
    layers["landlock"] = ({"active": True, "detail": f"ABI {abi}: reads only the Python installation, system "
                                                    "libraries and its folder; writes only its folder"
                                                    + ("; no TCP" if net else "")
                                                    + ("; signals scoped to itself" if scoped else "")}
                          if ok else {"active": False, "detail": f"restrict_self refused ({err})"})


def seccomp_filter(own_pid: int) -> bytes | None:
    """The BPF program (bytes of sock_filter) of this architecture, or None.  Rules:
    fork, vfork, exec, ptrace, other processes' memory, namespaces, mounts, kernel keys,
    BPF, io_uring -> EPERM; clone3 -> ENOSYS (glibc then creates threads with clone);
    clone only with CLONE_THREAD; kill, tgkill, rt_(tg)sigqueueinfo only to ``own_pid``
    or 0 (its own process group, which holds only itself); tkill and pidfd_send_signal
    -> EPERM; another architecture's calls (x32) -> EPERM; anything else allowed."""
    table = SYSCALLS.get(platform.machine())
    if table is None:
        return None
    code: list = []  # (op, k, jump-if-true label, jump-if-false label)
    ld = lambda offset: code.append((0x20, offset, None, None))  # BPF_LD|BPF_W|BPF_ABS  # noqa: E731
    jeq = lambda k, yes, no=None: code.append((0x15, k, yes, no))  # BPF_JMP|BPF_JEQ|BPF_K  # noqa: E731
    ret = lambda label, k: code.append(("label", label, None, None)) or code.append((0x06, k, None, None))  # noqa: E731
    ld(4)  # seccomp_data.arch
    jeq(table["audit_arch"], None, "kill")
    ld(0)  # seccomp_data.nr
    if table["x32_bit"]:
        code.append((0x45, table["x32_bit"], "eperm", None))  # BPF_JSET
    for nr in table["denied"].values():
        jeq(nr, "eperm")
    jeq(table["clone3"], "enosys")
    jeq(table["clone"], "clone")
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        jeq(table[name], "own_pid")
    code.append((0x06, SECCOMP_RET_ALLOW, None, None))
    code.append(("label", "clone", None, None))
    ld(16)  # low word of args[0]: the flags
    code.append((0x45, CLONE_THREAD, "allow", "eperm"))
    code.append(("label", "own_pid", None, None))
    ld(16)  # low word of args[0]: the target pid (an int)
    jeq(own_pid, "allow")
    jeq(0, "allow", "eperm")
    ret("allow", SECCOMP_RET_ALLOW)
    ret("eperm", SECCOMP_RET_ERRNO | EPERM)
    ret("enosys", SECCOMP_RET_ERRNO | ENOSYS)
    ret("kill", SECCOMP_RET_KILL_PROCESS)
    labels, program = {}, []
    for op, k, yes, no in code:
        if op == "label":
            labels[k] = len(program)
        else:
            program.append((op, k, yes, no))
    out = b""
    for i, (op, k, yes, no) in enumerate(program):
        jt = labels[yes] - i - 1 if yes else 0
        jf = labels[no] - i - 1 if no else 0
        out += struct.pack("HBBI", op, jt, jf, k)
    return out


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp(layers: dict) -> None:
    code = seccomp_filter(os.getpid())
    if code is None:
        layers["seccomp"] = {"active": False, "detail": f"no filter for architecture {platform.machine()}"}
        return
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if LIBC.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        layers["seccomp"] = {"active": False, "detail": f"filter refused ({_errno_text()})"}
        return
    layers["seccomp"] = {"active": True, "detail": f"{platform.machine()} filter: no fork, exec or ptrace, "
                                                   "threads only, signals only to itself"}


def run_program(program: str, memory_bytes: int, result_w: int) -> None:
    """Import the program, call get_policy() (or read POLICY), send the JSON of
    {"policy": value} or {"error": one line} down ``result_w``, and end."""
    sys.dont_write_bytecode = True

    def where(tb):
        lines = [f.lineno for f in traceback.extract_tb(tb) if f.filename == program]
        return f" (line {lines[-1]})" if lines else ""

    try:
        namespace = runpy.run_path(program, run_name="policy_program")
        fn = namespace.get("get_policy")
        if callable(fn):
            result = {"policy": fn()}
        elif "POLICY" in namespace:
            result = {"policy": namespace["POLICY"]}
        else:
            result = {"error": "defines neither get_policy() nor POLICY; define get_policy() returning the "
                               "policy bundle as a dict"}
        text = json.dumps(result, allow_nan=True)
    except MemoryError:
        text = json.dumps({"error": "ran out of memory (the program may allocate at most %d MiB)"
                                    % (memory_bytes >> 20)})
    except BaseException as exc:  # noqa: BLE001 -- whatever the program raised becomes its error line
        try:
            if isinstance(exc, SyntaxError):
                msg, at = exc.msg, " (line %s)" % exc.lineno
            else:
                msg, at = str(exc), where(exc.__traceback__)
            msg = " ".join(msg.split())[:300]
            text = json.dumps({"error": type(exc).__name__ + (": " + msg if msg else "") + at})
        except BaseException:  # noqa: BLE001 -- e.g. an exception whose str() raises
            text = json.dumps({"error": f"{type(exc).__name__} (its message could not be read)"})
    data = text.encode("utf-8", "replace")
    view = memoryview(data)
    while view:
        view = view[os.write(result_w, view):]
    os._exit(0)


if __name__ == "__main__":
    main()
