"""The PySpark entry point of a connector's batches on AWS Glue, for every source.

Glue runs a job's script with all the job run's arguments in ``sys.argv`` as ``--key value`` pairs,
its own among them (``--JOB_ID``, ``--JOB_RUN_ID``, ``--JOB_NAME``, ``--job-bookmark-option`` ...).
This script keeps the engine driver's arguments (``--plan WORK`` or ``--continuous WORK``,
``--attempt ID``, ``--snowflake-connection-ref SECRET``), gives the driver the environment of
``--driver-env`` (a JSON object: the region and endpoints of AWS, never a credential), and runs the
driver (:mod:`airflow_kinesis_snowflake.core.engine.driver`), which runs the work of whichever source
it belongs to. The package comes from the job run's ``--extra-py-files`` zip.
"""

import argparse
import json
import os
import sys

from airflow_kinesis_snowflake.core.engine.driver import (
    ATTEMPT_ARG,
    CONTINUOUS_ARG,
    PLAN_ARG,
    SNOWFLAKE_CONNECTION_REF_ARG,
    main,
)

#: The driver's environment variables, a JSON object (region and endpoints of AWS).
DRIVER_ENV_ARG = "--driver-env"
_DRIVER_ARGS = (PLAN_ARG, CONTINUOUS_ARG, ATTEMPT_ARG, SNOWFLAKE_CONNECTION_REF_ARG)


def driver_arguments(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The driver's arguments among Glue's ``argv`` (the others are Glue's), and the driver's environment."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for flag in (*_DRIVER_ARGS, DRIVER_ENV_ARG):
        parser.add_argument(flag)
    known, _ = parser.parse_known_args(argv)
    arguments: list[str] = []
    for flag in _DRIVER_ARGS:
        value = getattr(known, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            arguments += [flag, value]
    environment = json.loads(known.driver_env or "{}")
    return arguments, {str(name): str(value) for name, value in environment.items()}


if __name__ == "__main__":
    arguments, environment = driver_arguments(sys.argv[1:])
    os.environ.update(environment)
    sys.exit(main(arguments))
