"""Local stand-ins for AWS and Snowflake, shared by the tests and `make demo`."""

from tests.emulators.servers import Emulators, local_emulators

__all__ = ["Emulators", "local_emulators"]
