"""lazax.dynamo: ``torch.compile(backend="lazax")`` (not built yet; see issue 5).

This package exists so the monorepo's layout and dependency arrows are complete; the
backend (``aot_autograd`` over a bridge that traces each FX graph once through lazax
tensors and then executes by graph hash) lands with its issue.
"""

from ._version import __version__

__all__ = ["__version__"]
