"""A moto server on loopback, with the project's extensions applied before requests arrive.

Run as ``python -m tests.emulators.moto_server --port N``; it serves until terminated. With
``MOTO_WITHOUT_POLICY_SIMULATOR`` set, it has no SimulatePrincipalPolicy, as the stock image.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

from moto.server import ThreadedMotoServer

from tests.emulators import (
    dynamodb_scan_faults,
    dynamodb_streams,
    emr_serverless,
    fan_out,
    glue,
    kinesis_extensions,
    moto_extensions,
)
from tests.emulators.faults import exit_with_parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    moto_extensions.install(policy_simulator=not os.environ.get("MOTO_WITHOUT_POLICY_SIMULATOR"))
    exit_with_parent()
    kinesis_extensions.install()
    dynamodb_streams.install()
    fan_out.install()
    dynamodb_scan_faults.install()
    emr_serverless.install()
    glue.install()
    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
