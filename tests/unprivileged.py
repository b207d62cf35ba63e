"""Running a test's child process for which a read-only directory really is read-only.

Root writes into a chmod 0555 directory anyway (CAP_DAC_OVERRIDE), and tests here often run as
root. `ReadOnly(base)` picks the first way that works, proved by a probe child that tries to write
into such a directory:
  - not root: nothing to do, a 0555 directory is read-only;
  - root with CAP_SETPCAP: the child drops CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER from
    its bounding set before exec (it stays uid 0 and reads everything it owns; it writes nothing
    whose mode says no);
  - root otherwise: the child runs as nobody (its files must then be reachable by nobody: `dir()`
    is a world-traversable directory and `give()` hands a path to nobody).
`reason` says why none works (the test then skips with it).
"""
from __future__ import annotations

import ctypes
import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

PR_CAPBSET_DROP = 24
DAC_CAPS = (1, 2, 3)   # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def _drop_dac_caps() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in DAC_CAPS:
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _become(uid: int, gid: int):
    def run() -> None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return run


class ReadOnly:
    def __init__(self, base: Path):
        self.base = Path(base)
        self.preexec = None
        self.how = None
        self.reason = None
        self._owner = None
        if os.geteuid() != 0:
            self.how = "an unprivileged user"
            return
        if self._probe(_drop_dac_caps, self.base):
            self.preexec, self.how = _drop_dac_caps, "root without CAP_DAC_OVERRIDE"
            return
        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            self.reason = "running as root, the capabilities cannot be dropped and there is no user nobody"
            return
        shared = Path(tempfile.mkdtemp(prefix="luce-ro-"))
        shared.chmod(0o755)
        become = _become(nobody.pw_uid, nobody.pw_gid)
        if self._probe(become, shared):
            self.base, self.preexec, self.how = shared, become, "nobody"
            self._owner = (nobody.pw_uid, nobody.pw_gid)
            return
        shared.rmdir()
        self.reason = ("running as root: dropping CAP_DAC_OVERRIDE failed, and user nobody cannot run "
                       f"{sys.executable} or reach the test's files")

    def dir(self) -> Path:
        """Where the child's files go (the test's tmp_path, unless the child runs as nobody)."""
        return self.base

    def give(self, path: Path) -> None:
        """Let the child write path (a directory or file of the test), when it runs as another user."""
        if self._owner:
            os.chown(path, *self._owner)

    def run(self, args: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(args, preexec_fn=self.preexec, capture_output=True, text=True, **kw)

    def _probe(self, preexec, where: Path) -> bool:
        ro = Path(tempfile.mkdtemp(prefix="probe-", dir=where))
        ro.chmod(0o555)
        try:
            code = f"import os\ntry:\n    open({str(ro / 'x')!r}, 'w')\nexcept PermissionError:\n    print('refused')"
            out = subprocess.run([sys.executable, "-c", code], preexec_fn=preexec, capture_output=True, text=True,
                                 timeout=60)
            return out.returncode == 0 and out.stdout.strip() == "refused"
        except (OSError, subprocess.SubprocessError):
            return False
        finally:
            ro.chmod(0o755)
            for p in ro.iterdir():
                p.unlink()
            ro.rmdir()
