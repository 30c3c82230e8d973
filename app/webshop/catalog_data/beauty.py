"""Beauty & Personal Care: hair, skin, make-up, fragrance, shaving, oral care."""

from __future__ import annotations

from .base import Category, T, attrs, split

TYPES = (
    T(
        "Hair Care › Shampoo & Conditioner › Shampoos",
        "shampoo",
        q="shampoo|men's shampoo|sulfate free shampoo",
        a="sulfate free|paraben free|long lasting|for dry hair|for hair growth|for color treated"
        " hair|with argan oil|with tea tree|for hair loss|for damaged hair",
        o="size_floz scent pack_count",
        price=(6, 38),
    ),
    T(
        "Hair Care › Shampoo & Conditioner › Conditioners",
        "conditioner",
        q="conditioner|hair conditioner|leave in conditioner",
        a="leave in|sulfate free|for curly hair|for dry hair|with coconut oil|with shea butter"
        "|for frizzy hair|silicone free|deep conditioning",
        o="size_floz scent pack_count",
        price=(6, 32),
    ),
    T(
        "Hair Care › Hair Treatment › Hair Masks",
        "hair mask",
        q="hair mask|deep conditioning hair mask",
        a="deep conditioning|for damaged hair|for dry hair|with keratin|with argan oil"
        "|natural ingredients|for hair repair|paraben free",
        o="size_oz scent",
        price=(8, 40),
    ),
    T(
        "Hair Care › Hair Treatment › Hair Oils",
        "hair oil",
        q="hair oil|hair growth oil",
        a="for hair growth|with rosemary oil|cold pressed|for dry scalp|natural ingredients"
        "|lightweight|for hair loss|non greasy",
        o="size_ml scent",
        price=(7, 36),
    ),
    T(
        "Hair Care › Styling Products › Dry Shampoos",
        "dry shampoo",
        q="dry shampoo|volumizing dry shampoo",
        a="travel size|for oily hair|no white residue|volumizing|talc free|for dark hair",
        o="size_oz scent pack_count",
        price=(5, 26),
    ),
    T(
        "Hair Care › Styling Products › Hair Sprays",
        "hair spray",
        q="hair spray|strong hold hair spray",
        a="strong hold|flexible hold|humidity resistant|alcohol free|for fine hair|long lasting",
        o="size_oz pack_count",
        price=(5, 24),
    ),
    T(
        "Hair Care › Hair Accessories › Hair Clips",
        "hair clip",
        q="hair clips|claw clips",
        a="non slip|for thick hair|strong hold|for women|matte finish|for long hair",
        o="device_color pack_count",
        price=(5, 18),
    ),
    T(
        "Hair Care › Hair Extensions, Wigs & Accessories › Wigs",
        "wig",
        q="wig|lace front wig",
        a="lace front|human hair|natural hair|heat resistant|pre plucked|with baby hair|glueless",
        o="hair_color",
        price=(25, 180),
    ),
    T(
        "Skin Care › Face › Moisturizers",
        "face moisturizer",
        q="face moisturizer|moisturizer for dry skin",
        a="for sensitive skin|for dry skin|fragrance free|with hyaluronic acid|oil free"
        "|non comedogenic|with spf 30|anti aging|with ceramides",
        o="size_oz pack_count",
        price=(8, 60),
    ),
    T(
        "Skin Care › Face › Cleansers",
        "facial cleanser",
        q="face wash|facial cleanser",
        a="gentle|for oily skin|for acne prone skin|with salicylic acid|foaming|fragrance free"
        "|for sensitive skin|with vitamin c",
        o="size_floz pack_count",
        price=(6, 34),
    ),
    T(
        "Skin Care › Face › Serums",
        "face serum",
        q="face serum|vitamin c serum",
        a="with vitamin c|with hyaluronic acid|anti aging|for dark spots|with retinol"
        "|for fine lines|cruelty free|vegan",
        o="size_ml pack_count",
        price=(9, 65),
    ),
    T(
        "Skin Care › Eyes › Creams",
        "eye cream",
        q="eye cream|under eye cream",
        a="for dark circles|for puffiness|with caffeine|anti aging|fragrance free|with peptides",
        o="size_oz",
        price=(10, 58),
    ),
    T(
        "Skin Care › Sun › Sunscreens",
        "sunscreen",
        q="sunscreen|mineral sunscreen|face sunscreen",
        a="broad spectrum|water resistant|reef safe|spf 50|mineral|for sensitive skin"
        "|oil free|with zinc oxide",
        o="size_floz pack_count",
        price=(7, 36),
    ),
    T(
        "Skin Care › Face › Masks",
        "sheet mask",
        q="sheet mask|face mask skin care",
        a="hydrating|brightening|with collagen|with aloe vera|for dull skin|soothing",
        o="count",
        price=(6, 30),
    ),
    T(
        "Skin Care › Body › Lotions",
        "body lotion",
        q="body lotion|lotion for dry skin",
        a="for dry skin|with shea butter|fast absorbing|non greasy|fragrance free|with cocoa butter"
        "|long lasting|for eczema",
        o="size_floz scent",
        price=(5, 30),
    ),
    T(
        "Personal Care › Bath & Bathing Accessories › Body Washes",
        "body wash",
        q="body wash|men's body wash",
        a="moisturizing|for dry skin|with essential oils|sulfate free|long lasting|natural"
        " ingredients|for sensitive skin",
        o="size_floz scent pack_count",
        price=(4, 26),
    ),
    T(
        "Personal Care › Bath & Bathing Accessories › Bar Soaps",
        "bar soap",
        q="bar soap|natural soap bar",
        a="handmade|with goat milk|with essential oils|for sensitive skin|cold process|vegan"
        "|palm oil free",
        o="scent pack_count",
        price=(5, 28),
    ),
    T(
        "Personal Care › Deodorants & Antiperspirants › Deodorant",
        "deodorant",
        q="deodorant|natural deodorant|aluminum free deodorant",
        a="aluminum free|long lasting|baking soda free|for sensitive skin|48 hour|natural"
        " ingredients",
        o="scent pack_count",
        price=(4, 20),
    ),
    T(
        "Makeup › Lips › Lipstick",
        "lipstick",
        q="lipstick|matte lipstick",
        a="long lasting|matte finish|waterproof|transfer proof|moisturizing|cruelty free"
        "|highly pigmented",
        o="lip_color",
        price=(5, 32),
    ),
    T(
        "Skin Care › Lip Care › Balms & Moisturizers",
        "lip balm",
        q="lip balm|tinted lip balm",
        a="for dry lips|with beeswax|with spf 15|tinted|natural ingredients|long lasting",
        o="scent pack_count",
        price=(3, 16),
    ),
    T(
        "Makeup › Face › Foundation",
        "foundation",
        q="foundation|liquid foundation",
        a="full coverage|long lasting|oil free|matte finish|for oily skin|lightweight|with spf 20"
        "|dewy finish",
        o="shade",
        price=(8, 48),
    ),
    T(
        "Makeup › Eyes › Mascara",
        "mascara",
        q="mascara|waterproof mascara",
        a="waterproof|volumizing|lengthening|smudge proof|for sensitive eyes|clump free",
        o="eye_color pack_count",
        price=(5, 28),
    ),
    T(
        "Makeup › Eyes › Eyeliner",
        "eyeliner",
        q="eyeliner|liquid eyeliner",
        a="waterproof|smudge proof|long lasting|fine tip|easy apply|highly pigmented",
        o="eye_color pack_count",
        price=(4, 22),
    ),
    T(
        "Makeup › Eyes › Eyeshadow",
        "eyeshadow palette",
        q="eyeshadow palette|eye shadow",
        a="highly pigmented|long lasting|shimmer|matte finish|easy blend|cruelty free|with mirror",
        o="pack_count",
        price=(8, 45),
    ),
    T(
        "Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
        "makeup brush set",
        q="makeup brushes|makeup brush set",
        a="synthetic hair|soft bristles|with case|easy clean|for foundation|travel size",
        o="device_color",
        price=(7, 40),
    ),
    T(
        "Foot, Hand & Nail Care › Nail Polish",
        "nail polish",
        q="nail polish|gel nail polish",
        a="long lasting|quick dry|non toxic|high gloss|chip resistant|for nail art|gel",
        o="nail_color pack_count",
        price=(4, 22),
    ),
    T(
        "Fragrance › Women's › Eau de Parfum",
        "eau de parfum",
        q="perfume for women|eau de parfum",
        a="long lasting|floral|travel size|gift set|fresh|warm spicy",
        o="size_ml",
        price=(18, 120),
        plural="eau de parfums",
    ),
    T(
        "Fragrance › Men's › Cologne",
        "men's cologne",
        q="men's cologne|cologne for men",
        a="long lasting|woody|fresh|spray|gift set|travel size",
        o="size_ml",
        price=(16, 110),
    ),
    T(
        "Shaving & Hair Removal › Men's › Beard Care › Beard Oil",
        "beard oil",
        q="beard oil|beard growth oil",
        a="for beard growth|with jojoba oil|non greasy|natural ingredients|for itchy skin"
        "|softening",
        o="scent size_ml",
        price=(6, 30),
    ),
    T(
        "Shaving & Hair Removal › Men's › Electric Shavers",
        "electric shaver",
        q="electric shaver|electric razor for men",
        a="cordless|rechargeable|wet dry|waterproof|with pop up trimmer|for sensitive skin",
        o="device_color plug",
        price=(25, 160),
    ),
    T(
        "Hair Care › Styling Tools › Hair Dryers",
        "hair dryer",
        q="hair dryer|ionic hair dryer|blow dryer",
        a="ionic|fast drying|with diffuser|low noise|lightweight|for curly hair|1875 watt",
        o="device_color plug",
        price=(20, 150),
    ),
    T(
        "Hair Care › Styling Tools › Flat Irons",
        "hair straightener",
        q="flat iron|hair straightener",
        a="ceramic|titanium plates|adjustable temperature|dual voltage|auto shut off"
        "|for thick hair",
        o="device_color plug",
        price=(18, 120),
    ),
    T(
        "Oral Care › Toothbrushes › Electric Toothbrushes",
        "electric toothbrush",
        q="electric toothbrush|sonic toothbrush",
        a="rechargeable|with travel case|for sensitive teeth|with 2 minute timer|soft bristles"
        "|waterproof",
        o="device_color pack_count",
        price=(15, 90),
    ),
    T(
        "Oral Care › Toothpaste",
        "toothpaste",
        q="toothpaste|whitening toothpaste",
        a="fluoride free|whitening|for sensitive teeth|with charcoal|natural ingredients|sls free",
        o="pack_count",
        price=(3, 18),
        plural="toothpastes",
    ),
    T(
        "Skin Care › Face › Makeup Remover",
        "makeup remover",
        q="makeup remover|micellar water",
        a="oil free|for waterproof makeup|gentle|for sensitive skin|double sided|fragrance free",
        o="size_floz pack_count",
        price=(4, 24),
    ),
    T(
        "Skin Care › Body › Scrubs",
        "body scrub",
        q="body scrub|sugar scrub",
        a="exfoliating|for dead skin|with coffee|with sea salt|for ingrown hair|moisturizing",
        o="size_oz scent",
        price=(6, 30),
    ),
    T(
        "Personal Care › Bath & Bathing Accessories › Bath Bombs",
        "bath bomb",
        q="bath bombs|bath bomb gift set",
        a="gift set|with essential oils|handmade|fizzy|natural ingredients|for relaxation",
        o="scent count",
        price=(8, 34),
    ),
    T(
        "Makeup › Eyes › False Eyelashes",
        "false eyelash",
        q="false eyelashes|fake lashes",
        a="natural look|reusable|lightweight|easy apply|with glue|3d",
        o="pack_count",
        price=(4, 20),
        plural="false eyelashes",
    ),
)

CATEGORY = Category(
    name="beauty",
    root="Beauty & Personal Care",
    brands=split(
        "Luma Botanics|Verdel Skin|Pure Haven|Saltwater Rose|Northmoor|Bellaveen|Aurelle"
        "|Kindred Leaf|Moss & Mallow|Silkroot|Clearwell|Dewbury|Orchid Lane|Hale & Fern"
        "|Vantor Men|Copperfield|Lumiere Bay|Greyhaven|Sunnova|Petalia|Rivon|Auburnly"
        "|Cedar & Sage|Oakhurst Grooming|Bloomtide|Nordic Dew|Velvetine|Amberlane|Solenne"
        "|Fieldcraft|Maribelle|Tidepool|Zephyra|Honeycomb Apothecary|Lattice|Evermild"
    ),
    generic_attributes=attrs(
        "long lasting|easy use|high quality|cruelty free|paraben free|travel size"
        "|with natural ingredients|dermatologist tested|vegan|for all skin types|for women|for men"
    ),
    title_extras=split(
        "Salon Quality|Travel Size|for Women and Men|Gift Set|Unisex|Daily Use"
        "|Professional Grade|Made in USA|Clean Beauty|Value Pack"
    ),
    intros=split(
        "brings a spa-like routine into your bathroom|was developed with skin care experts"
        "|is made for everyday use at home and on the go|is formulated in small batches"
        "|gives you salon results without the salon price"
    ),
    closings=split(
        "Not tested on animals.|Keep out of reach of children.|For external use only."
        "|Store in a cool, dry place.|Packaging may vary.|Satisfaction guaranteed."
    ),
    types=TYPES,
)
