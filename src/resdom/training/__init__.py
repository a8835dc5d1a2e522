"""Training (spec §2 objectives, spec §6 protocol): config, samples and batches, objectives, the trainer, DDP."""

from resdom.training.config import TrainConfig, make_train_config, resolve_configs
from resdom.training.objectives import OBJECTIVES, Objective, get_objective
from resdom.training.trainer import fit

__all__ = ["OBJECTIVES", "Objective", "TrainConfig", "fit", "get_objective", "make_train_config", "resolve_configs"]
