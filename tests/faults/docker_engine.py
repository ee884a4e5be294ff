"""A real Docker engine for the fault tests, started once per session, and a busybox image to run.

The ``docker_engine`` fixture (import ``running_engine`` to have it) starts Debian's ``dockerd``
(``scripts/test`` installs docker.io and busybox-static) with every path of its own under a fresh
temporary folder: data root, exec root, pid file and the unix socket the tests talk to, so it
touches no engine of the machine. The data root is a filesystem of its own (a sparse ext4 image,
loop-mounted) where it can be: inode numbers there are handed out by ext4 alone, which gives a
removed file's inode to the next file created, as Docker's rotation does on a quiet disk; on a
shared ``/tmp`` other processes take them first. No bridge network and no iptables rules are set
up (the containers run with ``--network none``); overlay2 is tried first, then vfs. It answers
within about a second here. The image is ``docker import`` of a tar holding the static ``busybox``
as ``/bin/busybox`` and ``/bin/sh``: its shell runs every other applet (``printf``, ``tr``,
``sleep``) itself. Containers log with json-file, which Docker writes to
``<data root>/containers/<id>/<id>-json.log`` and rotates itself (``max-size``, ``max-file``). The
session's end removes the containers and stops the engine.

If the engine cannot start, the tests that use it fail with one line saying why: they never skip.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

IMAGE = "obsbox-busybox:test"
START_SECONDS = 30


class EngineError(RuntimeError):
    """The engine could not be started or did not do what was asked; the message says why."""


@dataclass
class Container:
    """One container of the engine's, and the json-file log Docker writes for it."""

    engine: Engine
    id: str
    log: Path

    def wait(self, timeout: float = 60) -> int:
        """Its exit code, once it stopped."""
        return int(self.engine.docker("wait", self.id, timeout=timeout))

    def start(self) -> None:
        """Run it (again: Docker appends to the same log file)."""
        self.engine.docker("start", self.id)


@dataclass
class Engine:
    """A running engine: its socket, and the image the tests run."""

    socket: Path
    root: Path
    image: str = IMAGE
    containers: list[Container] = field(default_factory=list)

    @property
    def data_root(self) -> Path:
        return self.root / "data"

    def docker(self, *args: str, stdin: bytes | None = None, timeout: float = 60) -> str:
        """Run the docker CLI against this engine; its output, or an EngineError with its stderr."""
        try:
            done = subprocess.run(
                ["docker", "-H", f"unix://{self.socket}", *args],
                input=stdin,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise EngineError(f"docker {args[0]} did not answer within {timeout} s") from exc
        if done.returncode != 0:
            raise EngineError(f"docker {' '.join(args[:2])}: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode().strip()

    def answers(self) -> bool:
        try:
            self.docker("version", "--format", "{{.Server.Version}}", timeout=5)
        except EngineError:
            return False
        return True

    def create(self, script: str, *, max_size: str = "100k", max_file: int = 3) -> Container:
        """A busybox container that will run ``sh -c script``, logging to json-file with Docker's
        rotation; its log's path is known before it starts (a reader can be there from the first byte)."""
        cid = self.docker(
            "create",
            "--network",
            "none",
            "--log-driver",
            "json-file",
            "--log-opt",
            f"max-size={max_size}",
            "--log-opt",
            f"max-file={max_file}",
            self.image,
            "sh",
            "-c",
            script,
        )
        container = Container(self, cid, self.data_root / "containers" / cid / f"{cid}-json.log")
        self.containers.append(container)
        return container


class InodeWatch:
    """Notes each inode a path names, sampled every 10 ms, to see Docker's rotations as they happen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.inodes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.01):
            try:
                inode = os.stat(self.path).st_ino
            except FileNotFoundError:
                continue  # between Docker's rename and its create
            if not self.inodes or self.inodes[-1] != inode:
                self.inodes.append(inode)

    def stop(self) -> list[int]:
        """The inodes in the order seen (a rotation between two samples of 10 ms may be missed)."""
        self._stop.set()
        self._thread.join(5)
        return self.inodes


def busybox_image() -> bytes:
    """A tar of the static busybox as ``/bin/busybox`` and ``/bin/sh``, for ``docker import``."""
    binary = shutil.which("busybox")
    if binary is None:
        raise EngineError("busybox is not installed (Debian's busybox-static; scripts/test installs it)")
    data = Path(binary).read_bytes()
    if b"ld-linux" in data[:8192]:  # PT_INTERP: a dynamic busybox would need a libc in the image
        raise EngineError(f"{binary} is linked dynamically; install Debian's busybox-static")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        folder = tarfile.TarInfo("bin")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        entry = tarfile.TarInfo("bin/busybox")
        entry.size, entry.mode = len(data), 0o755
        tar.addfile(entry, io.BytesIO(data))
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname = tarfile.SYMTYPE, "busybox"
        tar.addfile(link)
    return out.getvalue()


def own_filesystem(folder: Path) -> None:
    """Mount a fresh ext4 filesystem at ``folder`` (a 1 GiB sparse image beside it); where loop
    devices or ``mkfs.ext4`` are missing, ``folder`` stays a plain folder."""
    image = folder.with_suffix(".ext4")
    folder.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(1 << 30)
    steps = (["mkfs.ext4", "-q", "-F", str(image)], ["mount", "-o", "loop", str(image), str(folder)])
    for step in steps:
        if subprocess.run(step, capture_output=True, check=False).returncode != 0:
            return


def start_engine(engine: Engine) -> subprocess.Popen[bytes]:
    """Start ``dockerd`` under ``engine.root`` and wait until it answers on its socket, trying overlay2
    and then vfs; an EngineError with the engine's last words when neither starts."""
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        raise EngineError("dockerd or docker is not installed (Debian's docker.io; scripts/test installs it)")
    if os.geteuid() != 0:
        raise EngineError("dockerd needs root here (no rootless setup)")
    root = engine.root
    own_filesystem(engine.data_root)
    why = ""
    for driver in ("overlay2", "vfs"):
        log = root / f"dockerd-{driver}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [
                    "dockerd",
                    f"--data-root={engine.data_root}",
                    f"--exec-root={root / 'exec'}",
                    f"--pidfile={root / 'dockerd.pid'}",
                    f"--host=unix://{engine.socket}",
                    f"--storage-driver={driver}",
                    "--iptables=false",
                    "--bridge=none",
                    "--log-level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline and process.poll() is None:
            if engine.answers():
                return process
            time.sleep(0.2)
        stop_engine(process)
        lines = log.read_text(errors="replace").strip().splitlines()
        why = lines[-1] if lines else f"no answer within {START_SECONDS} s"
    raise EngineError(f"dockerd did not start with overlay2 or vfs: {why}")


def release_filesystem(folder: Path) -> None:
    if os.path.ismount(folder):
        subprocess.run(["umount", str(folder)], capture_output=True, check=False)
    if os.path.ismount(folder):  # a mount the engine left busy: detach it, it goes when released
        subprocess.run(["umount", "--lazy", str(folder)], capture_output=True, check=False)


def stop_engine(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (dockerd then stops its containerd and unmounts its layers), SIGKILL after 20 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@pytest.fixture(scope="session", name="docker_engine")
def running_engine() -> Iterator[Engine]:
    """A running engine with the busybox image; started once per session, stopped at its end."""
    root = Path(tempfile.mkdtemp(prefix="obsbox-dockerd-"))  # short: unix socket paths are limited
    engine = Engine(root / "docker.sock", root)
    process, why = None, ""
    try:
        try:
            process = start_engine(engine)
            engine.docker("import", "-", IMAGE, stdin=busybox_image())
        except EngineError as exc:
            why = str(exc)
        if why:  # failed here, outside the handler: one line, without the exception it handled
            pytest.fail(f"no Docker engine: {why}", pytrace=False)
        yield engine
        if engine.containers:
            engine.docker("rm", "--force", *(c.id for c in engine.containers))
    finally:
        if process is not None:
            stop_engine(process)
        release_filesystem(engine.data_root)
        shutil.rmtree(root, ignore_errors=True)
