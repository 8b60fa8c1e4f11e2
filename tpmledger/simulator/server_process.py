"""Run the simulated LLM server in its own process on a free 127.0.0.1 port.

The parent writes a ``ServerConfig`` as JSON to the child's stdin; the child binds port 0,
prints ``{"port": N}`` as its first stdout line, and serves until SIGTERM/SIGINT or until
its parent goes away (so an interrupted fleet leaves no server behind).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from tpmledger.simulator.config import ServerConfig
from tpmledger.simulator.llm_server import build_app


@contextmanager
def running_llm_server(config: ServerConfig, host: str = "127.0.0.1") -> Iterator[str]:
    """Start a server process; yield its base URL (``http://host:port``); stop it on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "tpmledger.simulator.server_process", host],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C reaches the fleet first; it stops us in order
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(config.model_dump_json().encode())
        proc.stdin.close()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"simulated LLM server exited with code {proc.wait()}")
        port = int(json.loads(line)["port"])
        yield f"http://{host}:{port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _watch_parent(server: uvicorn.Server, parent: int) -> None:
    while not server.should_exit:
        if os.getppid() != parent:
            server.should_exit = True
        await asyncio.sleep(1.0)


async def serve(config: ServerConfig, host: str) -> None:
    """Serve on a port chosen by the kernel; announce it on stdout."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, config.port))
    # Listen before announcing the port: a client that connects the moment it reads the
    # port must be queued, not refused, while uvicorn is still starting.
    sock.listen(4096)
    uv_config = uvicorn.Config(
        build_app(config),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        backlog=4096,
    )
    server = uvicorn.Server(uv_config)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    watcher = asyncio.create_task(_watch_parent(server, os.getppid()))
    try:
        await server.serve(sockets=[sock])
    finally:
        watcher.cancel()


def main() -> None:
    config = ServerConfig.model_validate_json(sys.stdin.read())
    asyncio.run(serve(config, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"))


if __name__ == "__main__":
    main()
