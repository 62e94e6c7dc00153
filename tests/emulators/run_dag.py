"""``python -m tests.emulators.run_dag DAG_FILE DAG_ID``: dag.test() one DAG, exit 1 unless it succeeded."""

from __future__ import annotations

import argparse
import json
import runpy
import sys


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


if __name__ == "__main__":
    sys.exit(main())
