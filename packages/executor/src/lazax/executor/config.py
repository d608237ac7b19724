"""Every setting of the executor, in one place: constants and ``LAZAX_*`` variables.

TODO
"""

from __future__ import annotations

DEVICE_NAME = "lazax"
