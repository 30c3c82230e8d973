"""What each page shows, as a list of visible nodes, rendered in three modes.

``text`` (the default, docs/webshop.md "Pages and the text observation") joins the
visible text nodes with ``" [SEP] "``; empty nodes are not visible and are dropped.
``text_rich`` marks buttons as ``[button] X [button_]`` and a picked option as
``[clicked button] X [clicked button_]``, one node a line. ``html`` is a minimal page
with the same nodes as buttons, links and paragraphs.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.webshop.loader import Product

SEP = " [SEP] "
MODES = ("text", "text_rich", "html")


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
    BUTTON = "button"
    CLICKED = "clicked"


@dataclass(frozen=True, slots=True)
class Node:
    text: str
    kind: Kind = Kind.TEXT


def _instruction(instruction: str) -> list[Node]:
    return [Node("Instruction:"), Node(instruction)]


def search_page(instruction: str) -> list[Node]:
    return [Node("WebShop"), *_instruction(instruction), Node("Search", Kind.BUTTON)]


def results_page(
    instruction: str, page: int, total: int, products: Sequence[Product]
) -> list[Node]:
    nodes = [*_instruction(instruction), Node("Back to Search", Kind.BUTTON)]
    nodes.append(Node(f"Page {page} (Total results: {total})"))
    if page > 1:
        nodes.append(Node("< Prev", Kind.BUTTON))
    nodes.append(Node("Next >", Kind.BUTTON))
    for p in products:
        nodes += [Node(p.asin, Kind.BUTTON), Node(p.name), Node(p.price_text)]
    return nodes


def item_page(instruction: str, product: Product, chosen: Mapping[str, str]) -> list[Node]:
    nodes = [*_instruction(instruction), Node("Back to Search", Kind.BUTTON)]
    nodes.append(Node("< Prev", Kind.BUTTON))
    for name, values in product.options:
        nodes.append(Node(name))
        for value in values:
            kind = Kind.CLICKED if chosen.get(name) == value else Kind.BUTTON
            nodes.append(Node(value, kind))
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
        nodes += [Node(b) for b in product.bullets]
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
        "Your code:",
        "None",
        "(Paste it in your MTurk interface.)",
        "Purchased",
        "asin",
        asin,
        "options",
        _flask_tojson(chosen),
        *("attrs", "None", "category", "None", "query", "None", "product category", "None"),
        "Target",
        *("asin", "options", "attrs", "price upper", "instuction text"),
        *("category", "product category", "query"),
        "Goal",
        "None",
        "Reward",
        "Your score (min 0.0, max 1.0)",
        str(reward),
        "Reward Details",
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
        return SEP.join(n.text for n in nodes if n.text.strip())
    if mode == "text_rich":
        return "\n".join(_rich(n) for n in nodes if n.text.strip())
    if mode == "html":
        return _html(nodes)
    raise ValueError(f"Unknown observation mode {mode!r}; expected one of {', '.join(MODES)}")


def _rich(node: Node) -> str:
    if node.kind is Kind.BUTTON:
        return f"[button] {node.text} [button_]"
    if node.kind is Kind.CLICKED:
        return f"[clicked button] {node.text} [clicked button_]"
    return node.text


def _html(nodes: Sequence[Node]) -> str:
    body = []
    for node in nodes:
        if not node.text.strip():
            continue
        text = html.escape(node.text)
        if node.kind is Kind.TEXT:
            body.append(f"<p>{text}</p>")
        else:
            cls = ' class="clicked"' if node.kind is Kind.CLICKED else ""
            body.append(f'<button value="{text}"{cls}>{text}</button>')
    return "<!DOCTYPE html><html><body>" + "".join(body) + "</body></html>"
