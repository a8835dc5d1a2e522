"""Diagnose models trained elsewhere (docs/adapters.md).

- ``safe_pickle``: a restricted reader for ``torch.save`` files that never runs code from the file;
- ``recbole``: RecBole 1.x SASRec checkpoints -> a resdom run directory (``import_recbole``);
- ``pmixer``: pmixer/SASRec.pytorch state dicts (post-LN and ``norm_first``) -> a run (``import_pmixer``);
- ``rectools``: RecTools SASRec / BERT4Rec models (``model.save`` files, Lightning checkpoints) -> a run
  (``import_rectools``).

Any other model can be diagnosed without importing weights by implementing the interface of
``resdom.models.interface`` (see docs/adapters.md for a worked example).
"""

from resdom.adapters.pmixer import import_pmixer, pmixer_model
from resdom.adapters.recbole import import_recbole, read_recbole_checkpoint, recbole_item_tokens, recbole_model
from resdom.adapters.rectools import import_rectools, read_rectools_file, rectools_model
from resdom.adapters.safe_pickle import load_torch_file, loads_restricted

__all__ = [
    "import_pmixer", "import_recbole", "load_torch_file", "loads_restricted", "pmixer_model",
    "read_recbole_checkpoint", "recbole_item_tokens", "recbole_model", "import_rectools", "read_rectools_file",
    "rectools_model",
]
