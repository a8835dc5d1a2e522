"""Issue 60 §5: the frictions a practitioner met with their own data (the tab hint whatever the column names, the
GTS drop line that adds up, a warning for small evaluation sets, the Python API's counts and argument names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from resdom.data.readers import read_interactions
from resdom.errors import ResdomError


@pytest.mark.parametrize("header", ["user_id\titem_id\ttimestamp", "customer\tproduct\tts"])
def test_a_tsv_saved_as_csv_gets_the_tab_hint_whatever_its_column_names(tmp_path: Path, header: str) -> None:
    path = tmp_path / "shop.csv"
    path.write_text(f"{header}\nc1\tp1\t1\nc1\tp,1,x\t2\n")  # a comma in an id: line 3 parses as 3 columns
    cols = {} if header.startswith("user_id") else {"user_col": "customer", "item_col": "product", "time_col": "ts"}
    with pytest.raises(ResdomError) as e:
        read_interactions([path], "csv", **cols)
    assert str(e.value).startswith(f"{path}:3: expected 1 columns, found 3 (its header line holds no ',' but tabs: "
                                   "is the file separated by tabs? --format csv reads commas, --format tsv tabs")
    good = tmp_path / "good.csv"  # a comma file with a short row: no separator hint
    good.write_text("user_id,item_id,timestamp\nc1,p1,1\nc1,p2,2,9,9\n")
    with pytest.raises(ResdomError) as e:
        read_interactions([good], "csv")
    assert str(e.value) == f"{good}:3: expected 3 columns, found 5"
