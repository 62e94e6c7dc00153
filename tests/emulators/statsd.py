"""A StatsD receiver on a loopback UDP port: what Airflow's StatsD metrics backend sends, as lines."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StatsdReceiver:
    port: int
    lines: list[str] = field(default_factory=list)

    def metrics(self, prefix: str) -> dict[str, list[tuple[float, str]]]:
        """``name -> [(value, type)]`` of the received lines whose name starts with ``prefix``."""
        out: dict[str, list[tuple[float, str]]] = {}
        for line in list(self.lines):
            name, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            if name.startswith(prefix):
                out.setdefault(name, []).append((float(value), kind.split("|")[0]))
        return out

    def tagged(self, prefix: str) -> list[tuple[str, dict[str, str], float, str]]:
        """``(name, tags, value, type)`` of each received line whose name starts with ``prefix``, in order of
        arrival, its tags read from the InfluxDB form Airflow writes (``name,tag=value,...:1|c``;
        :meth:`airflow_env` with ``tags``)."""
        out = []
        for line in list(self.lines):
            key, _, rest = line.partition(":")
            name, *pairs = key.split(",")
            value, _, kind = rest.partition("|")
            if name.startswith(prefix):
                tags = dict(pair.split("=", 1) for pair in pairs)
                out.append((name, tags, float(value), kind.split("|")[0]))
        return out

    def airflow_env(self, prefix: str = "airflow", *, tags: bool = False) -> dict[str, str]:
        """``[metrics]`` settings that point Airflow's StatsD backend here; with ``tags``, it appends the
        tags to each name (``statsd_influxdb_enabled``)."""
        env = {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": prefix,
        }
        if tags:
            env["AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED"] = "True"
        return env


@contextmanager
def statsd_receiver() -> Iterator[StatsdReceiver]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    receiver = StatsdReceiver(port=sock.getsockname()[1])
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            try:
                packet = sock.recv(65535)
            except TimeoutError:
                continue
            # A packet may carry several metrics, one per line.
            receiver.lines.extend(packet.decode("utf-8", "replace").splitlines())

    thread = threading.Thread(target=receive, name="statsd-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        stop.set()
        thread.join()
        sock.close()
