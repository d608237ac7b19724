"""Test-session setup that must come before jax starts (pytest loads this first).

8 virtual CPU devices for the SPMD tests (``tests/test_sharding.py``); every other test
runs on device 0 as before. A device count the user already set is kept.
"""

import os

_FLAGS = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _FLAGS:
    os.environ["XLA_FLAGS"] = f"{_FLAGS} --xla_force_host_platform_device_count=8".strip()
