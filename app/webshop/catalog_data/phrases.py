"""Sentence templates shared by all categories: descriptions, bullets, instructions.

Placeholders: {a} an attribute ({A} upper-cased, {A_cap} capitalised), {noun} / {plural}
the product noun, {brand} / {BRAND} the brand, {intro} a category intro phrase, {an} the
article, {head} / {tail} / {adjs} parts of an instruction (see below), {v} an option value,
{label} an option's label ("flavor" for "flavor name").

Templates that put an attribute before the noun avoid "a"/"an" ("the {a} {noun}"), since
attributes are often nouns ("ankle strap") and some product nouns are plural ("jeans").
"""

from __future__ import annotations

from .base import split

DESCRIPTION_BY_SLOT: dict[str, tuple[str, ...]] = {
    "adj": split(
        "The {a} design sets it apart from ordinary {plural}."
        "|Key feature: {a}."
        "|Count on the {a} {noun} every day."
        "|{A_cap} is what makes it stand out."
        "|Shoppers pick it for one reason above all: {a}."
    ),
    "with": split(
        "It comes with {a}, a detail you will notice from the first day."
        "|Made with {a} for a noticeably better experience."
        "|Thanks to {a}, it does more than you would expect."
        "|Finished with {a}."
    ),
    "for": split(
        "Ideal for {a}.|A thoughtful choice for {a}.|Designed especially for {a}."
        "|Works great for {a}."
    ),
}

BULLET_BY_SLOT: dict[str, tuple[str, ...]] = {
    "adj": split(
        "{A}: The {a} {noun} that holds up to everyday use."
        "|{A}: Enjoy the {a} {noun} that does exactly what it promises."
        "|{A} - Tested again and again, so the {a} design lasts."
    ),
    "with": split(
        "{A}: Made with {a} so you can feel the difference."
        "|{A} - Every piece comes with {a} at no extra cost."
    ),
    "for": split("{A}: Specially made for {a}.|{A} - A reliable pick for {a}, day after day."),
}

GENERIC_BULLETS = split(
    "WHAT YOU GET: Your {noun} from {brand}, carefully packed and ready to use."
    "|WORRY-FREE PURCHASE: {brand} stands behind every order; contact us and we will make it"
    " right."
    "|THOUGHTFUL GIFT: A practical present for birthdays, holidays and housewarmings."
    "|EASY TO ENJOY: Simple to use and simple to care for, so it fits any routine."
    "|QUALITY YOU CAN SEE: Every {noun} is inspected before it ships."
    "|WHY {BRAND}: This {noun} {intro}."
)

# Synthetic instructions, the style of items_ins_v2: {head} is "<adjectives> <noun>",
# {tail} the " with ..." and " for ..." parts.
INSTRUCTION_SINGULAR = split(
    "i need {an} {head}{tail}|i am looking for {an} {head}{tail}|i want to buy {an} {head}{tail}"
    "|i would like {an} {head}{tail}|looking for {an} {head}{tail}|can you find me {an} {head}"
    "{tail}|get me {an} {head}{tail}|i'm searching for {an} {head}{tail}"
)
INSTRUCTION_PLURAL = split(
    "find me {head}{tail}|show me {head}{tail}|i am looking for {head}{tail}"
    "|i need some {head}{tail}|search for {head}{tail}"
)
INSTRUCTION_THAT_IS = split(
    "i need {an} {noun} that is {adjs}{tail}|i want {an} {noun} that is {adjs}{tail}"
    "|find me {an} {noun} that's {adjs}{tail}"
)

# Human-style instructions name options in words; they are lowercase and carry no price.
HUMAN_OPENERS = split(
    "i am looking for|i need|i want|i would like|im looking for|please find me"
    "|i'd like to buy|can you get me|i want to find|help me find"
)
OPTION_PHRASES: dict[str, tuple[str, ...]] = {
    "color": split("in {v}|in {v} color|in the color {v}|that comes in {v}"),
    "size": split("in size {v}|in {v} size|size {v}|in a {v}"),
    "pack": split("in a {v}|{v}|in the {v} option"),
    "*": split("in {v} {label}|with {label} {v}|in the {v} {label}"),
}
OPTION_LABELS: dict[str, str] = {
    "flavor name": "flavor",
    "pattern name": "pattern",
    "item package quantity": "quantity",
}
