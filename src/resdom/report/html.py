"""The report as one self-contained HTML file (figures as base64 PNG, tables as HTML, no scripts, no external
resources) and its Markdown twin (figures linked from ``figures/``).

Section ids are stable, for tests and links: ``findings``, ``runs``, ``fig-<key>`` per figure, ``tables`` and
``table-<name>`` per table.
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone

from resdom.limits import visible
from resdom.report.collect import RunRecord, left_out
from resdom.report.figures import ReportFigure, figure_keys
from resdom.report.findings import finding_lines, findings_by_group
from resdom.report.markdown import markdown_table, md_text
from resdom.report.tables import Table, format_value, html_text, to_html, to_markdown
from resdom.report.values import run_values

CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; margin: 0 auto;
       max-width: 1180px; padding: 1.5em 2em 4em; color: #222; line-height: 1.45; }
h1 { font-size: 1.8em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em;
     margin-top: 2em; } h3 { margin-top: 1.5em; }
.meta { color: #666; font-size: 0.9em; } .caption { color: #333; max-width: 60em; }
nav ul { columns: 2; padding-left: 1.2em; } nav a { color: #0058a3; text-decoration: none; }
figure { margin: 0.8em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
table.data { border-collapse: collapse; font-size: 0.88em; margin: 0.6em 0 1em; }
table.data th, table.data td { border-bottom: 1px solid #e4e4e4; padding: 0.3em 0.7em; text-align: left; }
table.data th { background: #f5f7fa; border-bottom: 2px solid #ccc; } table.data td.num { text-align: right;
  font-variant-numeric: tabular-nums; white-space: nowrap; }
.findings ol { background: #f7f7f2; border-left: 4px solid #0072B2; padding: 0.6em 1em 0.6em 2.5em; }
.findings h3 { margin: 1em 0 0.3em; font-size: 1.05em; }
.missing { color: #a00; font-style: italic; } .error { color: #a00; font-size: 0.85em; }
"""

RUNS_CAPTION = ("One row per run directory: its data set, model and seed (from config.json), the number of test "
                "users every figure is computed on, and test accuracy at α = 1.")
FINDINGS_CAPTION = ("The three findings that matter, per data set and model: how far the mixing ratio falls from "
                    "Attn to +Res, HRLI@1 against HRL2I@1, and what lowering α recovers.")
TABLES_CAPTION = "The summary tables (mean ± standard deviation over seeds; also written as Markdown, CSV and LaTeX)."
MISSING = "No run in this report has the diagnostics this figure needs."


def _run_rows(runs: list[RunRecord]) -> list[list[str]]:
    rows = []
    missing = left_out(runs)
    for r in runs:
        v = run_values(r)
        num = [format_value(x, "ratio") if (x := v.get(k)) is not None else "–" for k in ("HR@10", "NDCG@10")]
        users = format_value(n, "count") if (n := v.get("n_users")) is not None else "–"
        status = ("failed: " + r.error.splitlines()[0][:120] if r.error
                  else "; ".join(([f"stale, left out: {', '.join(r.stale)} (rerun resdom diagnose)"] if r.stale else [])
                                 + [c for p, c in missing.get(r.path, {}).items() if p not in r.stale]) or "ok")
        rows.append([r.dataset, r.model, "–" if r.seed is None else str(r.seed), r.protocol or "–", users, *num,
                     status, str(r.path)])
    return rows


RUN_HEADERS = ["Data set", "Model", "Seed", "Protocol", "Test users", "HR@10", "NDCG@10", "Status", "Run directory"]


def _html_table(headers: list[str], rows: list[list[str]], table_id: str) -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="data" id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _finding_item(sentence: str) -> str:
    """One finding as a list item numbered as report.md numbers it (``2. HRLI@1 ...`` stays item 2 where finding 1
    is missing: the list counted it as 1); a sentence without a number is an item of its own."""
    number, dot, text = sentence.partition(". ")
    if dot and number.isdigit():
        return f'<li value="{number}">{html_text(text)}</li>'
    return f'<li style="list-style: none">{html_text(sentence)}</li>'


def _findings_html(runs: list[RunRecord]) -> str:
    parts = []
    for head, sentences in findings_by_group(runs):
        items = "".join(_finding_item(x) for x in sentences)
        parts.append(f"<h3>{html_text(head)}</h3><ol>{items or '<li>(no diagnostics)</li>'}</ol>")
    return "".join(parts)


def _figure_titles(figures: list[ReportFigure]) -> dict[str, ReportFigure]:
    return {f.key: f for f in figures}


def render_html(runs: list[RunRecord], figures: list[ReportFigure], tables: list[Table], title: str,
                every_figure: bool = False) -> str:
    """The self-contained report page: a section per figure drawn; with ``every_figure`` a section for every
    figure the report knows, one without data saying so (the study's page, which shows what is still missing)."""
    by_key = _figure_titles(figures)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    toc = ['<li><a href="#findings">Findings</a></li>', '<li><a href="#runs">Runs</a></li>']
    parts = [f"<h1>{html_text(title)}</h1>",
             f'<p class="meta">{len(runs)} run(s), generated {stamp} by resdom.</p>']
    body = [f'<section id="findings" class="findings"><h2>Findings</h2><p class="caption">'
            f"{html_text(FINDINGS_CAPTION)}</p>{_findings_html(runs)}</section>",
            f'<section id="runs"><h2>Runs</h2><p class="caption">{html_text(RUNS_CAPTION)}</p>'
            f'{_html_table(RUN_HEADERS, _run_rows(runs), "table-runs")}</section>']
    for key in figure_keys():
        fig = by_key.get(key)
        if fig is None and not every_figure:
            continue
        name = fig.title if fig else key.replace("_", " ")
        toc.append(f'<li><a href="#fig-{key}">{html_text(name)}</a></li>')
        if fig is None:
            body.append(f'<section id="fig-{key}" class="figure-section"><h2>{html_text(name)}</h2>'
                        f'<p class="missing">{MISSING}</p></section>')
            continue
        data = base64.b64encode(fig.png_bytes()).decode("ascii")
        body.append(f'<section id="fig-{key}" class="figure-section"><h2>{html_text(fig.title)}</h2>'
                    f'<p class="caption">{html_text(fig.caption)}</p><figure>'
                    f'<img src="data:image/png;base64,{data}" alt="{html_text(fig.title)}" data-figure="{key}" '
                    f'width="{fig.display_width}">'
                    "</figure></section>")
    toc.append('<li><a href="#tables">Summary tables</a></li>')
    tab_html = [f'<section id="tables"><h2>Summary tables</h2><p class="caption">{html_text(TABLES_CAPTION)}</p>']
    for t in tables:
        tab_html.append(f'<section id="tables-{t.name}"><h3>{html_text(t.title)}</h3>'
                        f'<p class="caption">{html_text(t.caption)}</p>{to_html(t)}</section>')
    tab_html.append("</section>")
    nav = f'<nav><h2>Contents</h2><ul>{"".join(toc)}</ul></nav>'
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{html_text(title)}"
            f"</title><style>{CSS}</style></head>\n<body>\n" + "\n".join(parts + [nav] + body + tab_html)
            + "\n</body></html>\n")




def render_markdown(runs: list[RunRecord], figures: list[ReportFigure], tables: list[Table], title: str,
                    figure_dir: str = "figures", every_figure: bool = False) -> str:
    """The Markdown twin of ``render_html``; figures link to ``<figure_dir>/<key>.png``."""
    by_key = _figure_titles(figures)
    out = [f"# {md_text(title)}\n", f"{len(runs)} run(s).\n", "## Findings\n", FINDINGS_CAPTION + "\n",
           "```\n" + "\n".join(map(visible, finding_lines(runs))) + "\n```\n", "## Runs\n", RUNS_CAPTION + "\n",
           markdown_table(RUN_HEADERS, _run_rows(runs), empty=None)]
    for key in figure_keys():
        fig = by_key.get(key)
        if fig is None:
            if every_figure:
                out += [f"## {key.replace('_', ' ')}\n", f"_{MISSING}_\n"]
            continue
        out += [f"## {fig.title}\n", fig.caption + "\n", f"![{fig.title}]({figure_dir}/{key}.png)\n"]
    out += ["## Summary tables\n", TABLES_CAPTION + "\n"]
    for t in tables:
        out += [f"### {t.title}\n", t.caption + "\n", to_markdown(t)]
    return "\n".join(out)
