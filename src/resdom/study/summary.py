"""The ``summary`` block at the top of docs/results.md: what the blocks below it conclude, counted from their own
markdown. A pure function of the other blocks (nothing is computed twice, so the summary cannot disagree with them):
how many cells carry per-user evidence, the claims marks of the `sasrec` cells, the published values (the paper's and
its code base's) outside resdom's intervals, and the verdicts of the comparison, remedy, probe, echo,
reliance-dynamics and seed-spread blocks."""

from __future__ import annotations

import re
from collections import Counter

VERDICTS = ("lower", "higher", "equivalent", "undecided")
NO_EVIDENCE = "no per-user evidence"


def tables_of(md: str) -> list[list[dict[str, str]]]:
    """The rows of each markdown table in ``md``, in order, each row as ``{header: cell}`` (a table: consecutive lines
    starting "|", the first its header, the second its rule)."""
    tables: list[list[dict[str, str]]] = []
    header: list[str] | None = None
    for line in md.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            tables.append([])
        elif not set(line) <= set("|-: "):
            tables[-1].append(dict(zip(header, cells)))
    return tables


def table_rows(md: str) -> list[dict[str, str]]:
    """Every row of every markdown table in ``md`` (``tables_of``, flattened)."""
    return [row for table in tables_of(md) for row in table]


def tally(verdicts: list[str], order: tuple[str, ...] = VERDICTS) -> str:
    """"3 lower, 1 undecided": each verdict's count, in ``order`` then any other, none where there are none."""
    counts = Counter(verdicts)
    names = [v for v in order if counts[v]] + sorted(v for v in counts if v not in order)
    return ", ".join(f"{counts[v]} {v}" for v in names) if names else "none"


def _verdict(cell: str) -> str:
    """The verdict word of a cell ("undecided: no per-user evidence ..." -> "undecided")."""
    return cell.split(":", 1)[0].split(" (", 1)[0].strip()


_MARK = re.compile(r"([✓✗])(?: \(n=\d+\))?$")


def mark_of(cell: str) -> str | None:
    """The ✓ or ✗ a table cell ends with, also where a note of the seeds it rests on follows it (``✓ (n=2)``: a
    claim or a fidelity cell over fewer seeds than its row); None for a cell without one."""
    found = _MARK.search(cell)
    return found.group(1) if found else None


def claims_line(md: str, model: str = "sasrec") -> str:
    rows = [r for r in table_rows(md) if r.get("Model") == model]
    if not rows:
        return f"The paper's claims (`claims` block): no `{model}` cell stored."
    claims = [h for h in rows[0] if h not in ("Data set", "Model", "Seeds")]
    parts = []
    for claim in claims:
        marked = [(r["Data set"], r[claim]) for r in rows if mark_of(r[claim])]
        failed = [ds for ds, cell in marked if mark_of(cell) == "✗"]
        part = f"{claim}: {len(marked) - len(failed)} of {len(marked)}"
        parts.append(part + (f" (not on {', '.join(failed)})" if failed else ""))
    return (f"The paper's claims on resdom's `{model}` (`claims` block; data sets where the claim holds): "
            + "; ".join(parts) + ".")


def _outside_of(rows: list[dict[str, str]]) -> tuple[int, int]:
    """(distinct values marked ✗ under every same-day ordering held, distinct values marked) over the rows of
    comparable data sets: a row is named "data set (the paper's data set)", and the rows of one paper data set
    (beauty-ts and beauty-ts-itemties) test its published values under each ordering, once each value."""
    marks: dict[tuple[str, str], list[bool]] = {}
    for r in rows:
        name = next(iter(r.values()), "")
        if "not comparable" in name:
            continue
        paper = name[name.find("(") + 1:name.find(")")] if "(" in name else name
        for column, c in list(r.items())[1:]:
            if mark_of(c):
                marks.setdefault((paper, column), []).append(mark_of(c) == "✗")
    return sum(all(m) for m in marks.values()), len(marks)


# study.fidelity.single_run_sentence's count: the distinct published values outside one more run's prediction
# interval under every ordering held
SINGLE_RUN = re.compile(r"Of the (\d+) distinct published values? of comparable data sets with two seeds or more, "
                        r"(\d+) lies? outside even the 95% prediction interval of one more resdom run")


def fidelity_line(md: str) -> str:
    tables = tables_of(md) or [[]]
    # each table's sentence on one more run, where it has one (the second table follows "The same for")
    single = [SINGLE_RUN.findall(part)[:1] for part in md.split("\nThe same for `", 1)]
    counts = [_outside_of(t) for t in tables[:2]]
    line = (f"Beside the paper's published numbers (`fidelity` block): {counts[0][0]} of {counts[0][1]} distinct "
            "published values on comparable data sets lie outside resdom's 95% interval under every same-day "
            "ordering held")
    for (n, off) in single[0]:
        line += f", {off} of {n} outside even one more resdom run's 95% prediction interval"
    if len(counts) > 1:  # the model trained with the paper's early stopping
        line += f"; with the paper's early stopping, {counts[1][0]} of {counts[1][1]}"
        for (n, off) in single[1] if len(single) > 1 else []:
            line += f" and {off} of {n}"
    return line + (" (the sentences under the tables name them; the prose after them gives what was measured about the "
                   "causes).")


def published_line(md: str) -> str:
    marked = [c for r in table_rows(md) for c in r.values() if mark_of(c)]
    outside = sum(mark_of(c) == "✗" for c in marked)
    return (f"Beside time-to-split's published accuracy (`published_accuracy` block): {outside} of {len(marked)} "
            "published values with an interval to compare lie outside resdom's 95% interval.")


def comparisons_line(md: str, block: str, what: str) -> str:
    """The tested rows' verdicts, and how many of the undecided rest on a single seed on a side ("seeds 1 / 3" or
    "seeds 3 / 1" in the difference's note), then the rows that wait for evidence."""
    rows = table_rows(md)
    tested = [r for r in rows if not r["Difference [95% CI]"].startswith(NO_EVIDENCE)]
    verdicts = [_verdict(r["Verdict"]) for r in tested]
    thin = sum(v == "undecided" and re.search(r"seeds (1 / \d+|\d+ / 1)\b", r["Difference [95% CI]"]) is not None
               for v, r in zip(verdicts, tested))
    one = f" ({thin} of the undecided with a single seed on a side)" if thin else ""
    return (f"{what} (`{block}` block): {len(tested)} of {len(rows)} comparisons tested on per-user evidence: "
            f"{tally(verdicts)}{one}; {len(rows) - len(tested)} wait for evidence.")


def remedies_line(md: str) -> str:
    rows = table_rows(md)
    answer = "Higher NDCG@10 at lower HRLI@1?"
    tested = [r for r in rows if NO_EVIDENCE not in r["NDCG@10: verdict, difference [95% CI]"]
              and NO_EVIDENCE not in r["HRLI@1: verdict, difference [95% CI]"]]
    return (f"Remedies, higher NDCG@10 at lower HRLI@1 than the base (`remedy_verdicts` block, docs/remedies.md): "
            f"{len(tested)} of {len(rows)} variants tested on per-user evidence: "
            f"{tally([_verdict(r[answer]) for r in tested], ('yes', 'no', 'undecided'))}; "
            f"{len(rows) - len(tested)} wait for evidence.")


def probe_line(md: str, block: str, question: str) -> str:
    rows = [r for r in table_rows(md) if "Comparison" in r]
    by_pair: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        diff = r["Difference [95% CI]"]
        state = ("not trained yet" if diff.startswith("not trained yet")
                 else "no evidence yet" if diff.startswith(NO_EVIDENCE) else _verdict(r["Verdict"]))
        by_pair.setdefault((r["Data set"], r["Comparison"]), []).append(f"{r['Metric']} {state}")
    parts = [f"{ds} `{pair}`: " + ", ".join(states) for (ds, pair), states in by_pair.items()]
    return f"{question} (`{block}` block): " + ("; ".join(parts) if parts else "no probe cell stored") + "."


def echo_line(md: str) -> str:
    rows = table_rows(md)
    return (f"Question 3, does the echo cost filtered HR@10 (`echo` block; lower: the echoing users' HR@10 is lower "
            f"within the frequency strata): {len(rows)} cells with per-user evidence: "
            f"{tally([_verdict(r['verdict']) for r in rows])}.")


def dynamics_line(md: str) -> str:
    rows = {r["scope"]: _verdict(r["verdict"]) for r in table_rows(md) if r.get("scope", "").startswith("all data")}
    found = "; ".join(f"{scope}: {verdict}" for scope, verdict in rows.items()) or "no monitored curve stored"
    return f"Question 4, does reliance keep rising after accuracy stops (`reliance_dynamics` block): {found}."


def spread_line(md: str) -> str:
    rows = {r["scope"]: r["verdict"] for r in table_rows(md) if r.get("scope", "").startswith("all data")}
    found = "; ".join(f"{scope}: {verdict}" for scope, verdict in rows.items()) or "no group of seeds stored"
    return f"Why seeds disagree on HRLI@1 (`seed_spread` block): {found}."


def coverage_line(md: str) -> str:
    """The coverage block's sentence over the store (without the queue command)."""
    found = [line for line in md.splitlines() if line.startswith("Per-user evidence")]
    sentence = found[0].split(" The queue", 1)[0] if found else "no sentence over the store."
    return f"What the verdicts rest on (`coverage` block): {sentence}"


def summary_markdown(blocks: dict[str, str]) -> str:
    """The ``summary`` block from the other blocks' markdown (``study.document_blocks``), one line each."""
    lines = [coverage_line(blocks["coverage"]), claims_line(blocks["claims"]), fidelity_line(blocks["fidelity"]),
             published_line(blocks["published_accuracy"]),
             comparisons_line(blocks["comparisons"], "comparisons", "Models against `sasrec`"),
             remedies_line(blocks["remedy_verdicts"]),
             probe_line(blocks["probe_readout"], "probe_readout", "Question 1, the readout position"),
             probe_line(blocks["probe_embeddings"], "probe_embeddings", "Question 2, tied output embeddings"),
             echo_line(blocks["echo"]), dynamics_line(blocks["reliance_dynamics"]),
             spread_line(blocks["seed_spread"])]
    return "".join(f"- {line}\n" for line in lines)
