"""Diagnostics of last-item reliance (spec §4): shuffles, last-item hit rates, norm-based decomposition,
residual-scaling sweep, miss recovery. They use a model only through ``resdom.models.interface``."""

from resdom.diagnostics.alpha import ALPHAS, AlphaResult, alpha_sweep
from resdom.diagnostics.hrli import HRLIResult, last_item_hit_rates
from resdom.diagnostics.mixing import MixingResult, mixing_ratios
from resdom.diagnostics.options import DiagnoseOptions
from resdom.diagnostics.recovery import RecoveryResult, miss_recovery
from resdom.diagnostics.registry import REGISTRY, Diagnostic, register
from resdom.diagnostics.runner import run_all
from resdom.diagnostics.shuffle import MODES, ShuffleResult, position_shuffle

__all__ = [
    "ALPHAS", "MODES", "REGISTRY", "AlphaResult", "DiagnoseOptions", "Diagnostic", "HRLIResult", "MixingResult",
    "RecoveryResult", "ShuffleResult", "alpha_sweep", "last_item_hit_rates", "miss_recovery", "mixing_ratios",
    "position_shuffle", "register", "run_all",
]
