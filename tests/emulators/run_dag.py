"""``python -m tests.emulators.run_dag DAG_FILE DAG_ID``: dag.test() one DAG, exit 1 unless it succeeded.

With ``RUN_DAG_SERVER`` naming the socket of a dag_runner server, the DAG runs in a process that
server forks, already warmed up, with this process's arguments, environment, working directory and
standard streams; this process waits for it and ends as it ended. See dag_runner.py.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import socket
import sys

SERVER_ENV = "RUN_DAG_SERVER"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dag_file")
    parser.add_argument("dag_id")
    parser.add_argument("--conf", default=None, help="run conf as JSON")
    args = parser.parse_args()
    namespace = runpy.run_path(args.dag_file)
    dag = namespace.get(args.dag_id)
    if dag is None:
        print(f"no DAG {args.dag_id!r} in {args.dag_file}", file=sys.stderr)
        return 2
    run = dag.test(run_conf=json.loads(args.conf) if args.conf else None)
    state = str(getattr(run, "state", "unknown"))
    print(f"DAG_RUN_STATE={state}")
    return 0 if state.endswith("success") else 1


def delegated(address: str) -> int | None:
    """Have the dag_runner server at ``address`` run the DAG; its exit code, or None when it declined."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(address)
    except OSError:
        return None
    with conn:
        request = json.dumps(
            {
                "argv": sys.argv[1:],
                "env": dict(os.environ),
                "cwd": os.getcwd(),
                "executable": sys.executable,
                "client": os.getpid(),
            }
        ).encode()
        socket.send_fds(conn, [len(request).to_bytes(8, "big")], [0, 1, 2])
        conn.sendall(request)
        replies = conn.makefile("rb")
        for line in replies:
            reply = json.loads(line)
            if "declined" in reply:
                return None
            if "returncode" in reply:
                code = int(reply["returncode"])
                if code < 0:  # killed: so is this process, by the same signal
                    signal.signal(-code, signal.SIG_DFL)
                    os.kill(os.getpid(), -code)
                return code
    print("the dag_runner server went away during the DAG run", file=sys.stderr)
    return 1


if __name__ == "__main__":
    server = os.environ.get(SERVER_ENV)
    code = delegated(server) if server else None
    sys.exit(main() if code is None else code)
