"""Behaviour of the original WebShop text env, checked over HTTP on the native API."""

from __future__ import annotations

from html.parser import HTMLParser

import httpx


def _start(client: httpx.Client, goal_id: int) -> str:
    r = client.post("/sessions", json={"goal_id": goal_id})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def _step(client: httpx.Client, sid: str, action: str) -> dict:
    r = client.post(f"/sessions/{sid}/step", json={"action": action})
    assert r.status_code == 200, r.text
    return r.json()


def test_actions_parsed_as_the_original(client, webshop_env) -> None:
    goal = webshop_env.goals[0]
    sid = _start(client, goal.index)
    searched = _step(client, sid, f"search[{goal.name}] and then click the first one")
    assert searched["info"]["valid"] and searched["info"]["page"] == "results"
    first = searched["available_actions"]["clickables"][2]
    assert _step(client, sid, f"click[{first.upper()}].")["info"]["page"] == "item"
    padded = _step(client, sid, "click[ Buy Now ]")
    assert padded["info"]["valid"] is False and padded["done"] is False
    bought = _step(client, sid, "click[buy now].")
    assert bought["done"] is True and bought["info"]["valid"]
    blank = _step(client, _start(client, goal.index), "search[ ]")
    assert blank["info"]["valid"] and blank["info"]["page"] == "results"


def test_done_page_is_the_originals_and_hides_the_target(client, webshop_env, oracle) -> None:
    goal = next(g for g in webshop_env.goals if len(g.goal_options) >= 2)
    sid = _start(client, goal.index)
    first = client.get(f"/sessions/{sid}/observation").json()["observation"]
    available = client.get(f"/sessions/{sid}/available_actions").json()

    def act(action: str) -> tuple:
        step = _step(client, sid, action)
        return step["observation"], step["available_actions"], step["reward"], step["done"]

    episode = oracle(goal, (first, available), act)
    assert episode.done and episode.reward == 1.0
    options = ", ".join(f'"{k}": "{v}"' for k, v in sorted(goal.goal_options.items()))
    assert episode.observations[-1] == (
        "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your "
        f"MTurk interface.) [SEP] Purchased [SEP] asin [SEP] {goal.asin} [SEP] options [SEP] "
        f"{{{options}}} [SEP] attrs [SEP] None [SEP] category [SEP] None [SEP] query [SEP] "
        "None [SEP] product category [SEP] None [SEP] Target [SEP] asin [SEP] options [SEP] "
        "attrs [SEP] price upper [SEP] instuction text [SEP] category [SEP] product category "
        "[SEP] query [SEP] Goal [SEP] None [SEP] Reward [SEP] Your score (min 0.0, max 1.0) "
        "[SEP] 1.0 [SEP] Reward Details [SEP] None"
    )
    assert goal.instruction not in episode.observations[-1]


def test_session_goes_on_after_buying_and_scores_again(client, webshop_env) -> None:
    goal = webshop_env.goals[0]
    sid = _start(client, goal.index)

    def buy_first_result() -> dict:
        results = _step(client, sid, f"search[{goal.name}]")
        assert results["done"] is False and results["info"]["valid"]
        _step(client, sid, f"click[{results['available_actions']['clickables'][2]}]")
        return _step(client, sid, "click[buy now]")

    first = buy_first_result()
    assert first["done"] is True and first["available_actions"] is None
    on_done = _step(client, sid, "click[buy now]")
    assert on_done["info"]["valid"] is False and on_done["done"] is False
    assert on_done["reward"] == 0.0
    second = buy_first_result()
    assert second["done"] is True and second["reward"] == first["reward"]
    summary = client.get(f"/sessions/{sid}").json()
    assert summary["done"] is True and summary["reward"] == second["reward"]
    assert summary["num_steps"] == 7


class _OriginalReader(HTMLParser):
    """Reads a page the way the original's text env does with BeautifulSoup: text nodes
    with their parent element, and the clickables of ``get_available_actions``."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.texts: list[tuple[str, str, dict]] = []  # (text, parent tag, parent attrs)
        self.has_search_bar = False
        self.buttons: list[str] = []
        self.radios: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if attributes.get("id") == "search_input":
            self.has_search_bar = True
        if tag == "input" and attributes.get("type") == "radio":
            self.radios.append(attributes)
        if tag not in ("input", "br", "img"):
            self.stack.append((tag, attributes))

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not self.stack:
            return  # under the document itself: not visible
        tag, attributes = self.stack[-1]
        if set(data) <= set(" \t\n\r\f"):
            data = "\n" if "\n" in data else " "
        self.texts.append((data, tag, attributes))
        if (
            "btn" in attributes.get("class", "").split()
            or attributes.get("class") == "product-link"
        ):
            self.buttons.append(data.lower())

    def clickables(self) -> list[str]:
        return self.buttons + [r["value"] for r in self.radios]

    def text(self) -> str:
        return " [SEP] ".join(t.strip() for t, _, _ in self.texts if t != "\n")

    def text_rich(self, visited: set[str]) -> str:
        chosen = {r["value"] for r in self.radios if "checked" in r}
        out = ""
        for t, tag, attributes in self.texts:
            if t == "\n":
                continue
            if tag == "button":
                line = f"[button] {t} [button_]"
            elif tag == "label" and t in chosen:
                line = f"  [clicked button] {t} [clicked button_]"
                out = f"You have clicked {t}.\n" + out
            elif tag == "label":
                line = f"  [button] {t} [button_]"
            elif attributes.get("class") == "product-link":
                mark = "clicked button" if t in visited else "button"
                line = f"\n[{mark}] {t} [{mark}_]"
            else:
                line = t
            out += line + "\n"
        return out


def test_html_mode_reads_as_the_original_pages(client, webshop_env) -> None:
    goal = next(g for g in webshop_env.goals if len(g.goal_options) >= 2)
    sid = _start(client, goal.index)
    option = next(iter(goal.goal_options.values()))
    actions = [f"search[{goal.name}]", f"click[{goal.asin.lower()}]", f"click[{option}]",
               "click[features]"]  # fmt: skip
    for action in [None, *actions]:
        if action is not None:
            assert _step(client, sid, action)["info"]["valid"], action
        page = {
            mode: client.get(f"/sessions/{sid}/observation", params={"mode": mode}).json()[
                "observation"
            ]
            for mode in ("text", "text_rich", "html")
        }
        reader = _OriginalReader()
        reader.feed(page["html"])
        available = client.get(f"/sessions/{sid}/available_actions").json()
        assert reader.has_search_bar == available["has_search_bar"]
        assert reader.clickables() == available["clickables"]
        assert reader.text() == page["text"]
        assert (
            reader.text_rich({goal.asin} if action and "click" in action else set())
            == (page["text_rich"])
        )
        if action == f"click[{option}]":
            assert f"  [clicked button] {option} [clicked button_]\n" in page["text_rich"]
            assert page["text_rich"].startswith(f"You have clicked {option}.\n")
