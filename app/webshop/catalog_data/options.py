"""Option lists a product can offer, by pool name: (option name, values in display order).

A product takes 2-4 values of a pool (keeping this order, so sizes stay sorted). Pools
that share an option name ("size") are never combined on one product.
"""

from __future__ import annotations

from .base import split

OPTION_POOLS: dict[str, tuple[str, tuple[str, ...]]] = {
    # apparel and accessories
    "color_apparel": (
        "color",
        split(
            "Black|White|Navy Blue|Heather Grey|Charcoal|Burgundy|Olive Green|Royal Blue"
            "|Light Pink|Khaki|Red|Forest Green|Lavender|Mustard Yellow|Denim Blue|Camel"
        ),
    ),
    "color_print": (
        "color",
        split(
            "Black Floral|Blue Leopard|Red Plaid|Green Camo|White Polka Dot|Pink Tie Dye"
            "|Grey Stripe|Multicolor"
        ),
    ),
    "size_apparel": ("size", split("X-Small|Small|Medium|Large|X-Large|XX-Large|3X-Large")),
    "size_women_num": ("size", split("2|4|6|8|10|12|14|16|18")),
    "size_waist": (
        "size",
        split("28W x 30L|30W x 30L|30W x 32L|32W x 32L|34W x 32L|36W x 34L|38W x 34L"),
    ),
    "size_shoe": ("size", split("6|6.5|7|7.5|8|8.5|9|9.5|10|10.5|11|12|13")),
    "size_shoe_wide": ("size", split("7 Wide|8 Wide|9 Wide|10 Wide|11 Wide|12 Wide")),
    "size_kids": ("size", split("2T|3T|4T|5|6|7|8|10|12|14")),
    "size_onesize": ("size", split("One Size|Small-Medium|Large-X-Large")),
    "size_ring": ("size", split("5|6|7|8|9|10|11")),
    "length_chain": ("length", split("16 Inch|18 Inch|20 Inch|22 Inch|24 Inch")),
    "fit_type": ("fit type", split("Men|Women|Youth")),
    "sleeve": ("style", split("Short Sleeve|Long Sleeve|Sleeveless|Three Quarter Sleeve")),
    "neckline": ("style", split("Crew Neck|V Neck|Henley|Polo|Mock Neck")),
    "metal_color": ("color", split("Gold|Silver|Rose Gold|Black|Two Tone")),
    "material_jewel": (
        "material",
        split("Sterling Silver|Stainless Steel|14K Gold Plated|Titanium|Brass"),
    ),
    "lens_color": ("color", split("Black Grey|Tortoise Brown|Blue Mirror|Gold Green|Clear")),
    "pack_apparel": ("pack", split("1 Pack|3 Pack|5 Pack|6 Pack|10 Pack")),
    # beauty
    "size_floz": (
        "size",
        split("2 Fl Oz|3.4 Fl Oz|8 Fl Oz|12 Fl Oz|16.9 Fl Oz|33.8 Fl Oz"),
    ),
    "size_oz": ("size", split("0.5 Ounce|1 Ounce|1.7 Ounce|2.5 Ounce|3.4 Ounce|6.7 Ounce")),
    "size_ml": ("size", split("10 ml|30 ml|50 ml|100 ml|200 ml")),
    "scent": (
        "scent",
        split(
            "Lavender|Coconut|Eucalyptus Mint|Unscented|Citrus|Vanilla|Rose|Tea Tree"
            "|Sandalwood|Fresh Linen|Cherry Blossom|Oud"
        ),
    ),
    "shade": (
        "color",
        split("Fair|Ivory|Light|Light Medium|Natural Beige|Medium|Warm Honey|Tan|Deep|Espresso"),
    ),
    "lip_color": (
        "color",
        split("Nude|Rose Pink|Classic Red|Berry|Coral|Mauve|Plum|Peach|Brick Red|Wine"),
    ),
    "nail_color": (
        "color",
        split(
            "Ballet Pink|Cherry Red|Matte Black|Glitter Silver|Pastel Mint|Coral Crush"
            "|Midnight Blue|Nude Blush|01#|07#|12#"
        ),
    ),
    "eye_color": ("color", split("Black|Brown|Dark Brown|Navy|Bronze|Emerald")),
    "hair_color": (
        "color",
        split("Natural Black|Dark Brown|Chestnut|Honey Blonde|Platinum|Auburn|Ombre Grey"),
    ),
    "pack_count": ("pack", split("1 Pack|2 Pack|3 Pack|4 Pack|6 Pack|12 Pack")),
    "count": ("size", split("10 Count|20 Count|30 Count|60 Count|90 Count|120 Count")),
    "device_color": ("color", split("Black|White|Rose Gold|Silver|Blue|Pink|Teal")),
    "plug": ("style", split("US Plug|UK Plug|EU Plug|Cordless")),
    # grocery
    "size_food_oz": ("size", split("4 Ounce|6 Ounce|8 Ounce|12 Ounce|16 Ounce|24 Ounce|32 Ounce")),
    "size_food_pack": (
        "size",
        split(
            "1 Ounce (Pack of 24)|1.5 Ounce (Pack of 12)|2 Ounce (Pack of 6)"
            "|5 Ounce (Pack of 4)|8 Ounce (Pack of 3)|12 Ounce (Pack of 2)"
        ),
    ),
    "size_lb": ("size", split("1 Pound|2 Pound|3 Pound|5 Pound|10 Pound")),
    "size_drink": (
        "size",
        split("8.4 Fl Oz (Pack of 12)|12 Fl Oz (Pack of 12)|16 Fl Oz (Pack of 6)|1 Liter"),
    ),
    "size_pods": ("size", split("12 Count|24 Count|40 Count|72 Count|96 Count")),
    "size_bags": ("size", split("20 Count|40 Count|80 Count|100 Count (Pack of 2)")),
    "flavor_snack": (
        "flavor name",
        split(
            "Sea Salt|Barbecue|Sour Cream & Onion|Cheddar|Honey Mustard|Jalapeno"
            "|Salt & Vinegar|Original|Ranch"
        ),
    ),
    "flavor_sweet": (
        "flavor",
        split(
            "Chocolate|Vanilla|Strawberry|Salted Caramel|Peanut Butter|Cookies & Cream"
            "|Mint Chip|Birthday Cake|Coconut"
        ),
    ),
    "flavor_coffee": (
        "flavor",
        split("Original|Hazelnut|French Vanilla|Caramel|Mocha|Pumpkin Spice|Dark Roast|Decaf"),
    ),
    "flavor_tea": (
        "flavor",
        split(
            "Green Tea|Chamomile|Earl Grey|Peppermint|Jasmine|Ginger Lemon|Hibiscus"
            "|English Breakfast|Rooibos"
        ),
    ),
    "flavor_fruit": (
        "flavor name",
        split("Lemon|Raspberry|Mango|Peach|Watermelon|Mixed Berry|Black Cherry|Orange|Lime"),
    ),
    "flavor_savory": (
        "flavor",
        split("Original|Garlic Herb|Smoky Chipotle|Lemon Pepper|Teriyaki|Sweet & Spicy"),
    ),
    "roast": ("style", split("Light Roast|Medium Roast|Dark Roast|Espresso Roast")),
    "pack_grocery": ("pack", split("Pack of 1|Pack of 2|Pack of 3|Pack of 4|Pack of 6")),
    # electronics
    "color_device": (
        "color",
        split("Black|White|Silver|Space Gray|Blue|Rose Gold|Red|Green|Midnight"),
    ),
    "capacity_storage": ("capacity", split("32GB|64GB|128GB|256GB|512GB|1TB|2TB")),
    "capacity_battery": ("capacity", split("5000mAh|10000mAh|20000mAh|26800mAh")),
    "length_cable": ("length", split("1 ft|3 ft|6 ft|10 ft|15 ft|25 ft")),
    "style_device": ("style", split("Standard|Pro|Plus|Bundle|Lite|Max")),
    "size_screen": ("size", split("24 Inch|27 Inch|32 Inch|43 Inch|50 Inch|55 Inch|65 Inch")),
    "size_tablet": ("size", split("8 Inch|10.2 Inch|10.9 Inch|11 Inch|12.9 Inch")),
    "size_laptop": ("size", split("13 Inch|14 Inch|15.6 Inch|17 Inch")),
    "phone_model": (
        "style",
        split("iPhone 13|iPhone 14|iPhone 15|Galaxy S22|Galaxy S23|Pixel 7|Pixel 8"),
    ),
    "band_size": ("size", split("38mm|40mm|41mm|42mm|44mm|45mm")),
    "pack_electronics": ("pack", split("1 Pack|2 Pack|3 Pack|4 Pack|5 Pack")),
    "connector": ("style", split("USB-C|Lightning|Micro USB|USB-A")),
    "resolution": ("style", split("1080P|2K|4K|5K")),
    # home and garden
    "color_home": (
        "color",
        split(
            "White|Gray|Beige|Navy|Sage Green|Charcoal|Natural|Walnut|Espresso|Ivory"
            "|Terracotta|Black|Blush Pink|Mustard"
        ),
    ),
    "finish": ("color", split("Rustic Brown|Black Oak|White Wash|Walnut|Gray Wash|Natural")),
    "size_bed": ("size", split("Twin|Full|Queen|King|California King")),
    "size_rug": ("size", split("2' x 3'|3' x 5'|4' x 6'|5' x 7'|6' x 9'|8' x 10'")),
    "size_curtain": (
        "size",
        split("42W x 63L|42W x 84L|52W x 63L|52W x 84L|52W x 95L|52W x 108L"),
    ),
    "size_pillow": ("size", split("16 x 16 Inch|18 x 18 Inch|20 x 20 Inch|12 x 20 Inch")),
    "size_wall": ("size", split("12x16 Inch|16x24 Inch|20x30 Inch|24x36 Inch|3 Panels")),
    "size_pot": ("size", split("4 Inch|6 Inch|8 Inch|10 Inch|12 Inch")),
    "size_hose": ("size", split("25 ft|50 ft|75 ft|100 ft")),
    "size_towel": ("size", split("Hand Towel|Bath Towel|Bath Sheet|Washcloth")),
    "set_count": ("size", split("Set of 2|Set of 4|Set of 6|Set of 8")),
    "material_furn": ("material", split("Solid Wood|Metal|Engineered Wood|Bamboo|Rattan")),
    "material_fabric": ("material", split("Cotton|Linen|Velvet|Polyester|Microfiber")),
    "pattern": ("pattern name", split("Solid|Striped|Floral|Geometric|Plaid|Botanical|Abstract")),
    "bulb_watt": (
        "size",
        split("40W Equivalent|60W Equivalent|75W Equivalent|100W Equivalent"),
    ),
    "color_temp": (
        "color",
        split("Soft White 2700K|Warm White 3000K|Cool White 4000K|Daylight 5000K"),
    ),
    "pack_home": ("pack", split("1 Pack|2 Pack|4 Pack|6 Pack|8 Pack")),
}
