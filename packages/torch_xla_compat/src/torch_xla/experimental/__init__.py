"""``torch_xla.experimental``: ``eager_mode(enable)``, ``eager_mode_context(enable)``,
``is_eager_mode()``: lazax's eager flag (each op runs at once, compiled per op shape)."""

import lazax.modes as lx

__all__ = ["eager_mode", "eager_mode_context", "is_eager_mode"]


def eager_mode(enable: bool) -> None:
    """Turn eager mode on or off for the rest of the process."""
    lx.eager_mode(bool(enable))


def is_eager_mode() -> bool:
    return lx.is_eager_mode()


def eager_mode_context(enable: bool):
    """``with eager_mode_context(True):`` eager inside, the previous mode after."""
    return lx.eager_mode_context(bool(enable))
