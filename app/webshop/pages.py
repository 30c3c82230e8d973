"""What each page shows, as the original's templates lay it out, rendered in three modes.

A page is the list of its text nodes, each with the text its template writes (spaces
included: ``"Instruction: "``, ``" <bullet>"``) and what kind of element holds it. The
modes are the original text env's:

- ``text`` (the default, docs/webshop.md "Pages and the text observation"): the nodes,
  stripped, joined with ``" [SEP] "``;
- ``text_rich`` (its ``convert_html_to_text(simple=False)``): one node a line, unstripped,
  buttons as ``[button] X [button_]``, option values indented by two spaces (a chosen one
  ``[clicked button]``, with a ``You have clicked X.`` line put first), product ids on a
  line of their own (a product opened since the last ``Back to Search`` ``[clicked
  button]``), and a newline at the end;
- ``html``: a page with the original's ids and classes (``#instruction-text``,
  ``#search_input``, ``.btn`` buttons, ``.product-link`` links, radio inputs named after
  their option), so that parsers written for the original read it.

As in the original (BeautifulSoup collapses a text node of only ASCII whitespace to a
newline when it has one, else to one space, and the converters skip newlines), a node
that is empty or whitespace with a newline is not shown, and one of spaces alone is
shown as an empty segment (``text``) or a space (``text_rich``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.webshop.loader import Product

SEP = " [SEP] "
MODES = ("text", "text_rich", "html")
_ASCII_SPACE = frozenset(" \t\n\r\f")


class Page(StrEnum):
    SEARCH = "search"
    RESULTS = "results"
    ITEM = "item"
    DESCRIPTION = "description"
    FEATURES = "features"
    REVIEWS = "reviews"
    DONE = "done"


SUB_PAGES = (Page.DESCRIPTION, Page.FEATURES, Page.REVIEWS)


class Kind(StrEnum):
    TEXT = "text"
    HEADING = "heading"  # "Instruction:", heading the instruction text that follows it
    BUTTON = "button"
    OPTION = "option"  # an option value: a radio input and its label
    PRODUCT = "product"  # a product id on the results page: a link to its item page


@dataclass(frozen=True, slots=True)
class Node:
    text: str
    kind: Kind = Kind.TEXT
    # OPTION: chosen; PRODUCT: opened since the last "Back to Search".
    marked: bool = False
    # OPTION: the option's name (the radio input's ``name``).
    group: str = ""


def _instruction(instruction: str, prefix: str = "Instruction:") -> list[Node]:
    return [Node(prefix, Kind.HEADING), Node(instruction)]


def search_page(instruction: str) -> list[Node]:
    return [
        Node("WebShop"),
        *_instruction(instruction, "Instruction: "),
        Node("Search", Kind.BUTTON),
    ]


def results_page(
    instruction: str,
    page: int,
    total: int,
    products: Sequence[Product],
    visited: Collection[str] = (),
) -> list[Node]:
    nodes = [*_instruction(instruction), Node("Back to Search", Kind.BUTTON)]
    nodes.append(Node(f"Page {page} (Total results: {total})"))
    if page > 1:
        nodes.append(Node("< Prev", Kind.BUTTON))
    nodes.append(Node("Next >", Kind.BUTTON))
    for p in products:
        nodes.append(Node(p.asin, Kind.PRODUCT, marked=p.asin in visited))
        nodes += [Node(p.name), Node(p.price_text)]
    return nodes


def item_page(instruction: str, product: Product, chosen: Mapping[str, str]) -> list[Node]:
    # The original marks a label chosen when '"<value>"' occurs in its URL, which holds
    # the chosen options as JSON: the same test here.
    chosen_json = json.dumps(dict(chosen))
    nodes = [*_instruction(instruction), Node("Back to Search", Kind.BUTTON)]
    nodes.append(Node("< Prev", Kind.BUTTON))
    for name, values in product.options:
        nodes.append(Node(name))
        for value in values:
            marked = f'"{value}"' in chosen_json
            nodes.append(Node(value, Kind.OPTION, marked=marked, group=name))
    nodes += [
        Node(product.name),
        Node(f"Price: {product.price_text}"),
        Node("Rating: N.A."),
        Node("Description", Kind.BUTTON),
        Node("Features", Kind.BUTTON),
        Node("Reviews", Kind.BUTTON),
        Node("Buy Now", Kind.BUTTON),
    ]
    return nodes


def sub_page(instruction: str, page: Page, product: Product) -> list[Node]:
    nodes = [*_instruction(instruction), Node("Back to Search", Kind.BUTTON)]
    nodes.append(Node("< Prev", Kind.BUTTON))
    if page is Page.DESCRIPTION:
        nodes.append(Node(product.description))
    elif page is Page.FEATURES:
        nodes += [Node(f" {b}") for b in product.bullets]
    return nodes


def done_page(asin: str, chosen: Mapping[str, str], reward: float) -> list[Node]:
    """The thank-you page as the original's text env renders it.

    Its template has slots for the purchased product's details and for the target, but
    the text env passes it only the asin, the options and the score: the other slots show
    ``None`` or nothing, and the target (which would leak the answer into recorded
    trajectories) is never shown. ``instuction text`` is the template's spelling.
    """
    texts = [
        "Thank you for shopping with us!",
        "Your code: ",
        "None",
        " (Paste it in your MTurk interface.)",
        "Purchased",
        "asin",
        asin,
        "options",
        _flask_tojson(chosen),
        *("attrs", "None", "category", "None", "query", "None", "product category", "None"),
        "Target",
        *("asin", "options", "attrs", "price upper", "instuction text"),
        *("category", "product category", "query"),
        "Goal ",
        "None",
        "Reward",
        "Your score (min 0.0, max 1.0)",
        str(reward),
        "Reward Details ",
        "None",
    ]
    return [Node(t) for t in texts]


def _flask_tojson(value: Mapping[str, str]) -> str:
    """Jinja's ``tojson`` filter under Flask's defaults: sorted keys, ASCII only, and the
    characters unsafe in HTML written as JSON escapes."""
    text = json.dumps(dict(value), sort_keys=True)
    for char in "<>&'":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def render(nodes: Sequence[Node], mode: str = "text") -> str:
    if mode == "text":
        return SEP.join(text.strip() for _, text in _shown(nodes))
    if mode == "text_rich":
        return _rich(nodes)
    if mode == "html":
        return _html(nodes)
    raise ValueError(f"Unknown observation mode {mode!r}; expected one of {', '.join(MODES)}")


def _shown(nodes: Sequence[Node]) -> Iterator[tuple[Node, str]]:
    """The nodes the original's converters see, with their text as BeautifulSoup gives it."""
    for node in nodes:
        text = node.text
        if text and set(text) <= _ASCII_SPACE:
            text = "\n" if "\n" in text else " "
        if text and text != "\n":
            yield node, text


def _rich(nodes: Sequence[Node]) -> str:
    out = ""
    for node, text in _shown(nodes):
        if node.kind is Kind.BUTTON:
            line = f"[button] {text} [button_]"
        elif node.kind is Kind.OPTION and node.marked:
            line = f"  [clicked button] {text} [clicked button_]"
            out = f"You have clicked {text}.\n" + out
        elif node.kind is Kind.OPTION:
            line = f"  [button] {text} [button_]"
        elif node.kind is Kind.PRODUCT:
            mark = "clicked button" if node.marked else "button"
            line = f"\n[{mark}] {text} [{mark}_]"
        else:
            line = text
        out += line + "\n"
    return out


def _html(nodes: Sequence[Node]) -> str:
    """The page with the original's ids and classes; elements one a line, so that the
    only whitespace nodes between them are newlines (which no converter shows)."""
    body: list[str] = []
    for i, node in enumerate(nodes):
        text = html.escape(node.text, quote=False)
        if node.kind is Kind.BUTTON:
            if node.text == "Search":
                body.append('<input id="search_input" type="text" name="search_query">')
            body.append(f'<button type="submit" class="btn">{text}</button>')
        elif node.kind is Kind.OPTION:
            value, name = html.escape(node.text), html.escape(node.group)
            checked = " checked" if node.marked else ""
            body.append(
                f'<input type="radio" id="radio_{i}" name="{name}" value="{value}"{checked}>'
                f'<label for="radio_{i}">{text}</label>'
            )
        elif node.kind is Kind.PRODUCT:
            body.append(f'<h4 class="product-asin"><a class="product-link">{text}</a></h4>')
        elif node.kind is Kind.HEADING:
            body.append(f'<div id="instruction-text"><h4>{text}<br>')
        elif i > 0 and nodes[i - 1].kind is Kind.HEADING:
            body[-1] += f"{text}</h4></div>"
        else:
            body.append(f"<div>{text}</div>")
    return "<!DOCTYPE html>\n<html>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>"
