# %% [markdown]
# # resdom quickstart
#
# Train SASRec on synthetic data, diagnose its last-item reliance, plot it, and diagnose a model trained
# elsewhere (a RecBole checkpoint). Runs offline on a CPU in well under a minute.
#
# This notebook is generated from `examples/quickstart.py` (a percent script, the file to edit) and executed
# in CI by `tests/test_examples.py`; `python tests/test_examples.py --write` regenerates and re-executes it.

# %% [markdown]
# ## Train, diagnose, plot
#
# `synthetic:demo` plants the structure of real purchase data: the next item is mostly one of a few items
# similar to the last one (here 1,000 users, 500 items, split by global time). `fit` trains in memory: nothing
# is written to disk unless you pass `out=` or call `fitted.save(...)`.

# %%
import resdom

split = resdom.prepare_split("synthetic:demo,n_users=1000", protocol="gts")
fitted = resdom.fit(split, "sasrec", epochs=5, hidden=32, max_len=20, lr=3e-3)
diagnosis = resdom.diagnose(fitted)  # shuffle, hrli, mixing, alpha, recovery; in memory
diagnosis.plot("mixing")

# %% [markdown]
# Attention mixes in context (a high mixing ratio at `Attn`), but after the residual connection (`+Res`) the
# block's output is almost only the position's own item: residual dominance.
#
# Every result has `to_dict()` (the JSON that `resdom diagnose` writes), `to_frame()` (a pandas table) and
# `plot()`. The model scores its own last input item first for most users (HRLI@1), the one before it rarely
# (HRL2I@1):

# %%
fitted

# %%
diagnosis.hrli.to_frame()

# %%
diagnosis.plot("hrli")

# %% [markdown]
# Shuffling every input item but the last (`keep_last`) barely changes accuracy; shuffling all of them does:

# %%
diagnosis.shuffle.to_frame().query("metric == 'NDCG@10'")

# %% [markdown]
# Scaling the residual down at inference (α from 1 to 0) raises mixing and breaks the echo of the last item:

# %%
diagnosis.plot("alpha")

# %%
resdom.evaluate(fitted, cutoffs=(1, 10)).to_frame()

# %% [markdown]
# ## Save a run for the command line
#
# `fitted.save(path)` writes a run directory that `resdom evaluate`, `resdom diagnose` and `resdom report`
# read; `resdom.load_run(path)` reads one back (also one trained by `resdom train`).

# %%
import shutil
import tempfile
from pathlib import Path

scratch = Path(tempfile.mkdtemp(prefix="resdom-quickstart-"))
run_dir = fitted.save(scratch / "sasrec-demo")
resdom.load_run(run_dir)

# %% [markdown]
# ## Diagnose a model trained elsewhere
#
# `resdom.adapters.import_recbole` turns a RecBole SASRec checkpoint and its `.inter` file into a run
# directory (RecBole itself is not needed). Any model that satisfies `resdom.models.interface.Diagnosable`
# can be diagnosed the same way. The example ships with resdom: a tiny RecBole model (40 items, 60 users) and
# the `.inter` file it was trained on.

# %%
from resdom.adapters import import_recbole
from resdom.resources import recbole_example

checkpoint, inter = recbole_example()
imported = resdom.load_run(import_recbole(checkpoint, str(inter), scratch / "recbole"))
recbole = resdom.diagnose(imported, what="hrli,mixing")
recbole.mixing.to_frame().query("layer == 'pooled'")

# %%
recbole.plot("mixing")

# %%
shutil.rmtree(scratch)
