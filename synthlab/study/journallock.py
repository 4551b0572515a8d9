"""The journal file's lock: Optuna's ``O_EXCL`` lock file that is never broken while its holder
lives on this machine, and that cuts a torn tail off the journal once held (:mod:`synthlab.study.storage`
owns the journal and its repair; this module only how processes take turns writing it)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time

from synthlab.study import optuna_api

LOCK_GRACE_PERIOD = 10  # seconds before a lock left by a killed process is broken
# file systems where an flock may not mean what it means on a local disk: it may stay on the
# client (two machines both "hold" it), reach a lock server that keeps a crashed client's lock
# until it reboots, or need the file open for writing; there the lock is Optuna's alone
_SHARED_FS = (
    "nfs",
    "cifs",
    "smb",
    "ceph",
    "fuse",
    "lustre",
    "gpfs",
    "9p",
    "gluster",
    "afs",
    "beegfs",
    "panfs",
    "virtiofs",
    "gfs2",
    "ocfs2",
    "vboxsf",
    "davfs",
)
_WAIT_WARNING = 60.0  # seconds between two "waiting for the journal lock" lines


def _local_fs(path: str) -> bool:
    """Whether ``path`` lies on a local file system (Linux: the type of its mount, found by mount
    id in /proc/self/mountinfo, is none of :data:`_SHARED_FS`; by mount id, not device, since a
    btrfs subvolume's device is in no mount line); False where that cannot be told."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            mnt = next(line.split()[1] for line in f.read().splitlines() if line.startswith("mnt_id:"))
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
    except (OSError, StopIteration, IndexError):
        return False
    finally:
        os.close(fd)
    for line in mounts:
        left, _, right = line.partition(" - ")
        if left.split()[:1] == [mnt] and right.split():
            return not right.split()[0].startswith(_SHARED_FS)
    return False


@functools.cache
def lock_class(repair):
    """Optuna's open-file lock that, once held, calls ``repair(journal, check_last=False)`` (the
    storage's cut of a torn tail; a subclass made on first use: this module loads no optuna at
    import), and that never breaks a lock
    whose holder is alive on this machine.

    The holder keeps an ``flock`` on the lock file it created (``O_EXCL``, as Optuna's) until it
    has removed it, and writes its pid in it. A lock file that stood still for the grace period
    is broken only if that flock is free: the kernel frees it when its holder dies, and a live
    holder, a paused process (SIGSTOP, a suspended job) or one in a slow ``fsync``, keeps it,
    however long (Optuna's broke it after the grace period: the paused holder then wrote beside
    the breaker, which may have cut its half-written entry off as torn); the waiting processes
    say so once a minute. Only on a local file system: on NFS and other shared ones (where
    machines share a journal) the grace period alone decides, as Optuna's."""
    import fcntl
    import threading
    import weakref

    from optuna.storages.journal import JournalFileOpenLock

    held: weakref.WeakSet = weakref.WeakSet()
    # taken from a lock file's open to its fd's registration in `held`, and by fork: a child
    # forked by another thread in between would otherwise keep an fd that no one closes
    registering = threading.RLock()

    def forget_in_child() -> None:
        # a child forked while a lock was held (a DataLoader worker) must not keep its flock:
        # the lock would outlive its killed holder for as long as the child runs
        for lock in list(held):
            fd, lock._fd = lock._fd, None
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        held.clear()
        registering.release()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(
            before=registering.acquire, after_in_parent=registering.release, after_in_child=forget_in_child
        )

    class RepairingLock(JournalFileOpenLock):
        def __init__(self, path: str) -> None:
            super().__init__(path, grace_period=LOCK_GRACE_PERIOD)
            self.journal = path
            self.lock_file = optuna_api.lock_path(self)
            self._fd: int | None = None
            self._flock: bool | None = None  # whether the journal's file system has a local flock

        def acquire(self) -> bool:
            self._take()
            try:
                repair(self.journal, check_last=False)
            except BaseException:
                self.release()
                raise
            return True

        def release(self) -> None:
            """Remove the lock file if it is still this holder's, and let go of it: on a local
            file system the file is removed before its flock is let go (no breaker can take it
            for a dead holder's), elsewhere the file is closed first (NFS would keep an open
            removed file as a ``.nfs*`` file)."""
            fd = self._fd  # dropped in `finally` only: an interrupt before it leaves it held, not lost
            if fd is None:
                raise RuntimeError("Error: did not possess lock")
            try:
                mine = os.fstat(fd)
                try:
                    there = os.stat(self.lock_file)
                except FileNotFoundError:
                    there = None
                if there is None or (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
                    raise RuntimeError(
                        f"the journal lock {self.lock_file} was broken while this process held it "
                        "(from another machine?): another process may have written at the same time"
                    )
                if not self._uses_flock():
                    self._fd = None
                    held.discard(self)
                    os.close(fd)
                os.unlink(self.lock_file)
            finally:
                if self._fd is not None:
                    with registering:
                        self._fd = None
                        held.discard(self)
                        os.close(fd)

        def _take(self) -> None:
            """Optuna's acquire, less its ``release()`` on any exception (interrupted while
            waiting, Ctrl-C or SIGTERM, that removed the lock another process held) and with
            the break rule above: only the lock file that stood still (the same file: Optuna's
            removed whichever was there by then, a new holder's too) and only if its flock is free."""
            if self._still_held():
                return
            delay, seen, since, warned = 0.001, None, time.monotonic(), time.monotonic()
            while True:
                if self._create():
                    return
                try:
                    st = os.stat(self.lock_file)
                except OSError:
                    continue  # just released: try again
                ident = (st.st_dev, st.st_ino, st.st_mtime_ns)
                if ident != seen:
                    seen, since = ident, time.monotonic()
                elif self.grace_period is not None and time.monotonic() - since > self.grace_period:
                    if self._break(ident):
                        delay = 0.001
                        continue
                    since = time.monotonic()  # its holder lives on this machine: wait on
                    if time.monotonic() - warned > _WAIT_WARNING:
                        warned = time.monotonic()
                        print(
                            f"synthlab: waiting for the journal lock {self.lock_file}, held for over "
                            f"{self.grace_period:g} s by process {self._holder()} on this machine "
                            "(paused?); it is not broken while that process lives",
                            file=sys.stderr,
                            flush=True,
                        )
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

        def _uses_flock(self) -> bool:
            if self._flock is None:  # the journal's folder exists by the first acquire
                self._flock = _local_fs(os.path.dirname(os.path.abspath(self.lock_file)))
            return self._flock

        def _still_held(self) -> bool:
            """Whether this object holds the lock already: an interrupt (Ctrl-C, SIGTERM) came
            after it was taken and before Optuna's ``try`` that releases it. Its next write (a
            worker's re-queue of its cell) then goes on under it and releases it, instead of
            waiting forever for its own flock."""
            if self._fd is None:
                return False
            try:
                mine, there = os.fstat(self._fd), os.stat(self.lock_file)
                if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                    return True
            except OSError:
                pass
            with registering:  # broken meanwhile (from another machine): take it anew
                fd = self._fd
                self._fd = None
                held.discard(self)
                os.close(fd)
            return False

        def _create(self) -> bool:
            """Create the lock file, hold its flock and name this process in it; False if it
            exists, or if it was broken before this process held its flock (paused right after
            creating it for longer than the grace period: another holder may have it by now)."""
            flock = self._uses_flock()
            with registering:
                try:
                    fd = os.open(self.lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    return False
                try:
                    if flock:
                        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a breaker looks at it
                        mine, there = os.fstat(fd), os.stat(self.lock_file)
                        if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
                            os.close(fd)
                            return False
                    with contextlib.suppress(OSError):
                        os.write(fd, f"{os.getpid()}\n".encode())
                    self._fd = fd
                    held.add(self)
                except FileNotFoundError:  # broken before the flock, and not replaced yet
                    os.close(fd)
                    return False
                except BaseException:  # interrupted before it was ours: leave no lock behind
                    self._fd = None
                    held.discard(self)
                    with contextlib.suppress(OSError):
                        mine, there = os.fstat(fd), os.stat(self.lock_file)
                        if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                            os.unlink(self.lock_file)
                    os.close(fd)
                    raise
            return True

        def _holder(self) -> str:
            try:
                with open(self.lock_file) as f:
                    return f.read().strip() or "?"
            except OSError:
                return "?"

        def _break(self, ident: tuple[int, int, int]) -> bool:
            """Remove the lock file ``ident`` (device, inode, mtime) unless a live process on
            this machine holds its flock. True if that file is gone (removed here or by its
            holder, or replaced by another): watch again; False if its holder lives."""
            try:
                fd = os.open(self.lock_file, os.O_RDONLY)
            except FileNotFoundError:
                return True
            except OSError:  # cannot even read it: the grace period alone decides, as Optuna's
                with contextlib.suppress(OSError):
                    st = os.stat(self.lock_file)
                    if (st.st_dev, st.st_ino, st.st_mtime_ns) == ident:
                        os.unlink(self.lock_file)
                return True
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino, st.st_mtime_ns) != ident:
                    return True
                if self._uses_flock():
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        return False
                    except OSError:  # no flock after all: the grace period decides
                        pass
                try:
                    now = os.stat(self.lock_file)
                except FileNotFoundError:
                    return True
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):  # still the file that stood still
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.lock_file)
                return True
            finally:
                os.close(fd)

    return RepairingLock
