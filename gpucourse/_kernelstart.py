"""Start Jupyter kernels that no other process can take the ports of.

Why: jupyter_client (7.x and 8.x alike) chooses a kernel's five TCP ports by binding
port 0 and closing the socket again (``LocalPortCache.find_available_port``,
``connect.write_connection_file``); the kernel binds them only once it has started,
seconds later on a busy machine. In between, any other process may be given the same
port: another test worker choosing ports for its own kernel, or any TCP client's
outgoing connection. ipykernel then fails to bind (``Address already in use``; with a
port given it tries once), exits, and the caller reports "Kernel died before replying
to kernel_info" (jupyter/jupyter_client#487).

The fix: :class:`RaceFreeProvisioner`, a ``LocalProvisioner`` whose kernels talk over
IPC (Unix domain sockets) in a folder of their own, so no port is ever chosen. Where
IPC is not available (Windows, a temporary folder whose path is too long for a
socket), the ports are chosen under a lock shared by every process on this machine,
which is held until the kernel listens on all of them, and below the machine's
ephemeral range, from which the system takes the ports of outgoing connections, so no
TCP client elsewhere can be given one in the meantime either.

:func:`install` makes it the default for every kernel this process starts (nbval,
nbclient, myst-nb / jupyter-cache: all go through jupyter_client's
``KernelProvisionerFactory``). Used by ``conftest.py``; ``setup`` lets Sphinx load this
module as an extension, so that the book's build starts its kernels the same way.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from jupyter_client.provisioning import LocalProvisioner
from jupyter_client.provisioning.factory import KernelProvisionerFactory

__all__ = ["NAME", "RaceFreeProvisioner", "ephemeral_range", "free_ports_below_the_ephemeral_range", "install",
           "ipc_possible", "setup"]

NAME = "gpucourse-race-free"
# A Unix socket's path must fit in sockaddr_un.sun_path: 108 bytes on Linux, 104 on macOS.
_SOCKET_PATH_LIMIT = 100
PORT_WAIT_S = 120.0  # the longest a kernel may take to listen, while the TCP lock is held
LOCK_PATH = Path(tempfile.gettempdir()) / "gpucourse-kernel-start.lock"


def ipc_possible(folder: Path) -> bool:
    """Whether kernels can use IPC sockets named ``folder/kernel-N`` on this machine."""
    import zmq

    return (os.name == "posix" and bool(zmq.has("ipc"))
            and len(str(folder / "kernel-99999")) <= _SOCKET_PATH_LIMIT)


class RaceFreeProvisioner(LocalProvisioner):
    """A local kernel over IPC in its own folder; TCP under a machine-wide lock otherwise.

    The folder is made before the connection file is written, kept across restarts
    (the kernel keeps its address) and removed when the kernel is shut down for good.
    """

    ipc_folder: Path | None = None
    _lock: Any = None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        km = self.parent
        if km is not None and self.ipc_folder is None and km.transport == "tcp":
            folder = Path(tempfile.mkdtemp(prefix="jk-"))
            if ipc_possible(folder):
                self.ipc_folder = folder
                km.transport, km.ip, km.cache_ports = "ipc", str(folder / "kernel"), False
            else:
                folder.rmdir()
        if km is not None and km.transport == "tcp":
            self._lock = _machine_lock()
            self._lock.acquire()
            if km.cache_ports and not self.ports_cached:      # a restart keeps its ports
                ports = free_ports_below_the_ephemeral_range(km.ip, len(_PORTS))
                if ports:
                    for name, port in zip(_PORTS, ports):
                        setattr(km, name, port)
                    self.ports_cached = True
        try:
            return await super().pre_launch(**kwargs)
        except BaseException:
            self._release_lock()
            raise

    async def launch_kernel(self, cmd: list[str], **kwargs: Any):
        try:
            info = await super().launch_kernel(cmd, **kwargs)
            if self._lock is not None:
                await _wait_until_listening(self, info)
            return info
        finally:
            self._release_lock()

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart=restart)
        if not restart and self.ipc_folder is not None:
            shutil.rmtree(self.ipc_folder, ignore_errors=True)
            self.ipc_folder = None

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


_PORTS = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")
_LOWEST_PORT = 20000       # above the ports that services usually listen on


def ephemeral_range() -> tuple[int, int]:
    """The ports this system gives outgoing connections (Linux: ip_local_port_range)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535    # IANA's dynamic range: the default on macOS and Windows


def free_ports_below_the_ephemeral_range(ip: str, count: int) -> list[int]:
    """``count`` ports that nothing listens on now, between 20000 and the ephemeral range
    ([] if the range starts too low to leave room)."""
    import random

    low = ephemeral_range()[0]
    candidates = list(range(_LOWEST_PORT, low))
    if len(candidates) < 100 * count:
        return []
    random.SystemRandom().shuffle(candidates)
    chosen = []
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind((ip, port))
            except OSError:
                continue
        chosen.append(port)
        if len(chosen) == count:
            return chosen
    return []


def _machine_lock():
    from filelock import FileLock

    return FileLock(str(LOCK_PATH))


async def _wait_until_listening(provisioner: LocalProvisioner, info: dict) -> None:
    """Return once the kernel accepts connections on all its TCP ports, or has exited."""
    ports = [info[k] for k in _PORTS]
    deadline = time.monotonic() + PORT_WAIT_S
    while ports and time.monotonic() < deadline:
        if provisioner.process is not None and provisioner.process.poll() is not None:
            return  # it died: the caller reports that
        try:
            socket.create_connection((info["ip"], ports[0]), timeout=1).close()
            ports.pop(0)
        except OSError:
            await asyncio.sleep(0.05)


class _Registered:
    """An entry point made in this process, for ``KernelProvisionerFactory`` (7.x and 8.x)."""

    name = NAME
    module_name, object_name = __name__, "RaceFreeProvisioner"
    value = f"{module_name}:{object_name}"

    def load(self):
        return RaceFreeProvisioner


def install() -> None:
    """Make :class:`RaceFreeProvisioner` the default for kernels this process starts.

    Kernel specs that name a provisioner of their own keep it. Idempotent.
    """
    factory = KernelProvisionerFactory.instance()
    factory.provisioners[NAME] = _Registered()
    factory.default_provisioner_name = NAME


def setup(app) -> dict:
    """Sphinx extension entry: the book's notebooks run on race-free kernels."""
    install()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
