"""The vocabulary of the synthetic catalog: five categories of product types.

Written for this project to look like WebShop's scraped store (same categories, the
same kind of titles, attributes and options), without any of its text.
"""

from __future__ import annotations

from .base import Attribute, Category, ProductType
from .beauty import CATEGORY as BEAUTY
from .electronics import CATEGORY as ELECTRONICS
from .fashion import CATEGORY as FASHION
from .garden import CATEGORY as GARDEN
from .grocery import CATEGORY as GROCERY
from .options import OPTION_POOLS

CATEGORIES: tuple[Category, ...] = (BEAUTY, FASHION, GARDEN, GROCERY, ELECTRONICS)

__all__ = ["CATEGORIES", "OPTION_POOLS", "Attribute", "Category", "ProductType"]
