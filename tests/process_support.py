"""Shared by the tests that start a server as its own process (llama_cpp.server, `strata serve`)."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen, timeout: float = 10) -> None:
    """Ask the process to stop, and kill it when it has not exited within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
