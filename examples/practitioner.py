# %% [markdown]
# # A practitioner's loop with resdom
#
# Your own interactions as a pandas DataFrame, in your own ids: measure two models on a held-out split (accuracy,
# coverage, popularity, novelty and how often they echo the last item), then fit on everything and recommend for
# known users, for new sessions with a whitelist, and list similar items. Tiny data and two epochs, so it runs in
# seconds on a CPU; the numbers are those of undertrained models, the calls are the ones you would make.
#
# This notebook is generated from `examples/practitioner.py` (a percent script, the file to edit) and executed in
# CI by `tests/test_examples.py`; `python tests/test_examples.py --write` regenerates and re-executes it.

# %% [markdown]
# ## Data: a DataFrame in your own ids
#
# Customers `c000`..., products `sku-000`...; each customer browses products close to the last one (the next is
# one of the three after it), the first-order structure of real sessions.

# %%
import numpy as np
import pandas as pd

import resdom

rng = np.random.default_rng(0)
n_items, rows = 60, []
for user in range(200):
    item, t = int(rng.integers(n_items)), 1_700_000_000.0 + float(rng.integers(10_000))
    for _ in range(int(rng.integers(4, 12))):
        rows.append((f"c{user:03d}", f"sku-{item:03d}", t))
        item, t = (item + int(rng.integers(1, 4))) % n_items, t + float(rng.integers(60, 3_600))
df = pd.DataFrame(rows, columns=["customer", "product", "ts"])
df.head()

# %% [markdown]
# ## Measure first: two models on a held-out split
#
# Leave-one-out holds out each customer's last two products (validation, test). `evaluate(..., beyond=True)` adds
# beyond-accuracy metrics of the same full-ranking top-K lists: catalogue coverage, the average training
# popularity of what is recommended, novelty (mean -log2 popularity share), and the echo: how often the top K
# holds the last input item (`Echo@K`, 0 whenever seen items are filtered, as here) or one of its nearest items
# by the model's own embeddings (`EchoNN@K`; its 3 nearest here, in a catalogue of 60 products, 10 by default).

# %%
split = resdom.prepare_split(df, user_col="customer", item_col="product", time_col="ts", protocol="loo")
tiny = dict(epochs=2, hidden=16, layers=1, max_len=10, lr=3e-3, progress=False)
models = {name: resdom.fit(split, name, **tiny) for name in ("sasrec", "gru4rec")}
results = {name: resdom.evaluate(fitted, cutoffs=(10,), beyond=True, neighbours=3) for name, fitted in models.items()}
pd.DataFrame({name: result.metrics for name, result in results.items()}).round(4)

# %% [markdown]
# One row per test customer (the target's rank, every metric), to look at users, not only means:

# %%
results["sasrec"].users.head()

# %% [markdown]
# ## Fit on everything, recommend
#
# `protocol="none"` holds nothing out: the model trains on all of it (a sample reads each customer's last `max_len`
# + 1 products, as under any split) for its epochs and keeps the last (`holdout_users=N` would keep a small slice
# for early stopping). Recommendations come back in RecTools' columns (`user_id, item_id, score, rank`) and your
# own ids, seen products filtered.

# %%
everything = resdom.prepare_split(df, user_col="customer", item_col="product", time_col="ts", protocol="none")
production = resdom.fit(everything, "sasrec", **tiny)
production.recommend(users=["c000", "c001"], k=3)

# %% [markdown]
# Two new sessions, never seen in training, scored from their products alone (no new split, nothing renumbered),
# with a whitelist of what may be recommended; a product the data does not know is left out and named in a note:

# %%
whitelist = [f"sku-{i:03d}" for i in range(0, n_items, 2)]
sessions = {"new-1": ["sku-010", "sku-012"], "new-2": ["sku-041", "sku-043", "sku-999"]}
recs = production.recommend(sequences=sessions, items=whitelist, k=3)
print(recs.attrs.get("note"))
recs

# %% [markdown]
# Similar products by cosine over the model's output item embeddings (the product itself left out):

# %%
production.similar_items(["sku-010", "sku-041"], k=3)

# %% [markdown]
# The same loop from the command line:
#
# ```bash
# resdom train shop.csv --user-col customer --item-col product --time-col ts --protocol loo --out runs/loo
# resdom evaluate runs/loo --beyond --per-user users.csv
# resdom train shop.csv --user-col customer --item-col product --time-col ts --protocol none --out runs/prod
# resdom recommend runs/prod --users c000,c001 -k 3
# resdom recommend runs/prod --sequences sessions.csv --items whitelist.txt -k 3
# resdom similar runs/prod --items sku-010,sku-041 -k 3
# ```
