"""resdom: train causal self-attention sequential recommenders and diagnose their last-item reliance.

Pipeline (one subpackage each): data -> models -> training -> evaluation -> diagnostics -> report,
with the command line in ``resdom.cli``.
"""

__version__ = "0.1.0"
