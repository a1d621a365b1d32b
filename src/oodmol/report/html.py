"""Static HTML for the report: pages, tables and figures as plain strings.

No template engine and nothing fetched: the style is inline in each page, so that a
report folder opens from disk (file://) anywhere, without a server or network."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 78em; color: #222; }
nav { margin-bottom: 1em; padding-bottom: .5em; border-bottom: 1px solid #ccc; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: .6em 0 1.4em; font-size: .85em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.paper td { font-style: italic; color: #555; background: #f6f6f6; }
tr.ratio td { color: #555; font-size: .9em; }
td.best { font-weight: bold; }
td.worst { text-decoration: underline; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption, p.note { font-size: .85em; color: #444; }
"""


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, a tooltip (where the number came from) and classes."""

    text: str
    title: str = ""
    classes: tuple[str, ...] = ()


@dataclass
class Table:
    """A header and rows of cells; a row's class marks paper and ratio rows."""

    header: list[Cell | str]
    rows: list[tuple[list[Cell | str], str]] = field(default_factory=list)

    def add(self, cells: list[Cell | str], row_class: str = "") -> None:
        self.rows.append((cells, row_class))


def slug(label: str) -> str:
    """A file-name-safe form of a model or benchmark label ("mlp [subset]" ->
    "mlp_subset"); distinct labels of one report stay distinct (collisions are
    refused by the caller)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "_"


def link(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


def _cell(cell: Cell | str, tag: str) -> str:
    if isinstance(cell, str):
        return f"<{tag}>{cell}</{tag}>"
    attributes = ""
    if cell.title:
        attributes += f' title="{escape(cell.title)}"'
    if cell.classes:
        attributes += f' class="{" ".join(cell.classes)}"'
    return f"<{tag}{attributes}>{escape(cell.text)}</{tag}>"


def table(data: Table, caption: str = "") -> str:
    """HTML of a table; plain strings are trusted HTML (links), Cell texts are escaped."""
    head = "".join(_cell(h, "th") for h in data.header)
    body = []
    for cells, row_class in data.rows:
        attribute = f' class="{row_class}"' if row_class else ""
        body.append(f"<tr{attribute}>" + "".join(_cell(c, "td") for c in cells) + "</tr>")
    caption_html = f"<caption>{escape(caption)}</caption>" if caption else ""
    rows = "".join(body)
    return f"<table>{caption_html}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def figure(stem: str, caption: str) -> str:
    """An <img> of `<stem>.png` with links to both files; `stem` is relative to the page."""
    return (
        f'<figure><img src="{escape(stem)}.png" alt="{escape(caption)}">'
        f"<figcaption>{escape(caption)} ({link(stem + '.png', 'PNG')}, "
        f"{link(stem + '.svg', 'SVG')})</figcaption></figure>"
    )


def page(title: str, nav: list[tuple[str, str]], body: list[str]) -> str:
    """A whole page: title, navigation links (href, text), body parts in order."""
    links = " ".join(link(href, text) for href, text in nav)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><nav>{links}</nav><h1>{escape(title)}</h1>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
