"""A real headless Chromium (Debian's ``chromium`` package), driven through the DevTools protocol.

``chromium --headless --dump-dom URL`` cannot send a cookie, and Airflow's UI pages are behind
its JWT cookie; so the browser is started with ``--remote-debugging-port=0`` and driven over its
DevTools WebSocket: set the cookie, load the page, wait for its load event, read the DOM as the
browser built it (``document.documentElement.outerHTML``) and take a screenshot. Nothing leaves
loopback.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from tests.emulators.servers import REPO_ROOT

INSTALL_HINT = (
    "Chromium is needed by the lag page's test: apt-get install -y chromium, or without root "
    "scripts/system-deps.sh chromium (make test runs it), which unpacks it into .test-work/chromium"
)


# Where scripts/system-deps.sh unpacks Chromium on a machine where it cannot install it (not root).
UNPACKED = REPO_ROOT / ".test-work" / "chromium" / "bin" / "chromium"


def chromium_executable() -> str | None:
    if found := shutil.which("chromium") or shutil.which("chromium-browser"):
        return found
    return str(UNPACKED) if UNPACKED.is_file() else None


@dataclass
class Page:
    """What the browser made of a page."""

    dom: str
    screenshot_png: bytes


class Browser:
    """One DevTools connection to a running headless Chromium."""

    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._ids = itertools.count(1)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command; its result (events that arrive meanwhile are dropped)."""
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self._socket.send(json.dumps(message))
        while True:
            answer = json.loads(self._socket.recv(timeout=60))
            if answer.get("id") == message_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result", {}))

    def wait_for_event(self, method: str, session: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            answer = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if answer.get("method") == method and answer.get("sessionId") == session:
                return

    def load(self, url: str, cookies: dict[str, str], width: int = 1100, height: int = 800) -> Page:
        """Load ``url`` in a new tab with ``cookies`` set for it; the DOM once loaded and a full-page screenshot."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        try:
            for name, value in cookies.items():
                self.call("Network.setCookie", session, name=name, value=value, url=url)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                session,
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            self.call("Page.enable", session)
            self.call("Page.navigate", session, url=url)
            self.wait_for_event("Page.loadEventFired", session)
            dom = self.call(
                "Runtime.evaluate", session, expression="document.documentElement.outerHTML", returnByValue=True
            )["result"]["value"]
            shot = self.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)["data"]
            return Page(str(dom), base64.b64decode(shot))
        finally:
            with contextlib.suppress(Exception):
                self.call("Target.closeTarget", targetId=target)


@contextmanager
def headless_chromium(timeout: float = 60) -> Iterator[Browser]:
    """Start Chromium headless with a throw-away profile; stopped when the block ends."""
    executable = chromium_executable()
    if executable is None:
        raise RuntimeError(INSTALL_HINT)
    profile = Path(tempfile.mkdtemp(prefix="chromium-"))
    process = subprocess.Popen(
        [
            executable,
            "--headless",
            "--no-sandbox",  # tests may run as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        active_port = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (active_port.is_file() and len(active_port.read_text().splitlines()) >= 2):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not open its DevTools port (exit status {process.poll()})")
            time.sleep(0.2)
        port, path = active_port.read_text().splitlines()[:2]
        with connect(f"ws://127.0.0.1:{port}{path}", max_size=64 * 2**20, open_timeout=timeout) as socket:
            yield Browser(socket)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # its renderer and helper processes, in its session
        shutil.rmtree(profile, ignore_errors=True)
