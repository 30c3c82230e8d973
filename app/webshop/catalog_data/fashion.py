"""Clothing, Shoes & Jewelry: men's, women's and kids' clothing, shoes, bags, jewellery."""

from __future__ import annotations

from .base import Category, T, attrs, split

TYPES = (
    T(
        "Men › Clothing › Shirts › T-Shirts",
        "men's t-shirt",
        q="men's t-shirts|men's tshirt",
        a="short sleeve|crew neck|cotton blend|classic fit|slim fit|machine wash|moisture wicking"
        "|for daily wear|tagless",
        o="color_apparel size_apparel neckline",
        price=(8, 30),
    ),
    T(
        "Women › Clothing › Tops, Tees & Blouses › Blouses & Button-Down Shirts",
        "women's blouse",
        q="women's blouses|women's tops",
        a="long sleeve|v neck|loose fit|chiffon|button down|casual|for work|machine wash",
        o="color_apparel size_apparel sleeve",
        price=(14, 45),
    ),
    T(
        "Women › Clothing › Tops, Tees & Blouses › T-Shirts",
        "women's graphic tee",
        q="women's graphic tees|women's t-shirts",
        a="short sleeve|loose fit|soft|crew neck|cotton heather|machine wash|for daily wear",
        o="color_apparel size_apparel",
        price=(9, 28),
    ),
    T(
        "Men › Clothing › Shirts › Dress Shirts",
        "men's dress shirt",
        q="men's dress shirts|men's button down shirt",
        a="long sleeve|wrinkle free|slim fit|regular fit|button down|easy care|stretch"
        "|for business",
        o="color_apparel size_apparel",
        price=(18, 60),
    ),
    T(
        "Women › Clothing › Dresses › Casual",
        "women's maxi dress",
        q="women's dresses|maxi dress|summer dress",
        a="short sleeve|v neck|with pockets|floral print|high waist|flowy|for beach|for summer",
        o="color_print size_apparel",
        price=(18, 65),
    ),
    T(
        "Men › Clothing › Jeans",
        "men's jeans",
        q="men's jeans|men's straight leg jeans",
        a="straight leg|slim fit|relaxed fit|stretch denim|classic fit|machine wash|button closure",
        o="color_apparel size_waist",
        price=(20, 70),
        plural="men's jeans",
    ),
    T(
        "Women › Clothing › Leggings",
        "women's leggings",
        q="women's leggings|high waisted leggings",
        a="high waist|tummy control|with pockets|squat proof|buttery soft|for yoga|for workout",
        o="color_apparel size_apparel",
        price=(10, 40),
        plural="women's leggings",
    ),
    T(
        "Men › Clothing › Shorts",
        "men's shorts",
        q="men's shorts|men's athletic shorts",
        a="elastic waist|with pockets|quick dry|drawstring closure|for gym|lightweight"
        "|7 inch inseam",
        o="color_apparel size_apparel",
        price=(12, 38),
        plural="men's shorts",
    ),
    T(
        "Women › Clothing › Fashion Hoodies & Sweatshirts",
        "women's hoodie",
        q="women's hoodies|women's sweatshirt",
        a="long sleeve|oversized|with pockets|drawstring|fleece lined|pullover|cropped",
        o="color_apparel size_apparel",
        price=(16, 50),
    ),
    T(
        "Men › Clothing › Fashion Hoodies & Sweatshirts",
        "men's hoodie",
        q="men's hoodies|men's pullover hoodie",
        a="long sleeve|fleece lined|with kangaroo pocket|zip up|heavyweight|athletic fit",
        o="color_apparel size_apparel",
        price=(18, 55),
    ),
    T(
        "Men › Clothing › Jackets & Coats › Lightweight Jackets",
        "men's jacket",
        q="men's jackets|men's windbreaker|men's rain jacket",
        a="water resistant|windproof|with hood|zip up|packable|lightweight|fleece lined",
        o="color_apparel size_apparel",
        price=(25, 110),
    ),
    T(
        "Women › Clothing › Sweaters › Cardigans",
        "women's cardigan",
        q="women's cardigan|open front cardigan",
        a="open front|long sleeve|chunky knit|with pockets|button down|lightweight|oversized",
        o="color_apparel size_apparel",
        price=(18, 55),
    ),
    T(
        "Men › Clothing › Pants › Sweatpants",
        "men's jogger",
        q="men's joggers|men's sweatpants",
        a="elastic waist|with zipper pockets|tapered leg|drawstring|slim fit|for running|fleece",
        o="color_apparel size_apparel",
        price=(15, 45),
    ),
    T(
        "Women › Clothing › Active › Yoga Pants",
        "women's yoga pants",
        q="women's yoga pants|flare yoga pants",
        a="high waist|bootcut|with pockets|tummy control|stretch|for workout|wide leg",
        o="color_apparel size_apparel",
        price=(14, 45),
        plural="women's yoga pants",
    ),
    T(
        "Women › Clothing › Lingerie, Sleep & Lounge › Bras › Sports Bras",
        "sports bra",
        q="sports bra|women's sports bra",
        a="high impact|wireless|removable padding|racerback|moisture wicking|for running",
        o="color_apparel size_apparel pack_apparel",
        price=(12, 40),
    ),
    T(
        "Men › Clothing › Underwear › Boxer Briefs",
        "men's boxer brief",
        q="men's underwear|boxer briefs",
        a="moisture wicking|tagless|cotton stretch|no ride up|breathable|elastic waistband",
        o="color_apparel size_apparel pack_apparel",
        price=(12, 40),
    ),
    T(
        "Men › Clothing › Socks › Athletic Socks",
        "athletic sock",
        q="athletic socks|crew socks",
        a="cushioned|moisture wicking|arch support|breathable|for running|ankle|crew length",
        o="color_apparel size_onesize pack_apparel",
        price=(8, 28),
    ),
    T(
        "Women › Clothing › Lingerie, Sleep & Lounge › Sleep & Lounge › Sets",
        "women's pajama set",
        q="women's pajamas|pajama set for women",
        a="short sleeve|long sleeve|button down|soft|with pockets|satin|two piece",
        o="color_print size_apparel",
        price=(16, 50),
    ),
    T(
        "Men › Clothing › Swim › Board Shorts",
        "men's swim trunk",
        q="men's swim trunks|board shorts",
        a="quick dry|with mesh lining|with pockets|elastic waist|for beach|stretch",
        o="color_print size_apparel",
        price=(12, 40),
    ),
    T(
        "Women › Clothing › Swimsuits & Cover Ups › One-Pieces",
        "one piece swimsuit",
        q="one piece swimsuit|women's swimsuit",
        a="tummy control|high waist|ruched|adjustable straps|v neck|padded|for beach",
        o="color_print size_apparel",
        price=(18, 60),
    ),
    T(
        "Men › Shoes › Athletic › Running",
        "men's running shoe",
        q="men's running shoes|men's sneakers",
        a="non slip|lightweight|breathable|rubber sole|arch support|memory foam|for walking",
        o="color_apparel size_shoe",
        price=(30, 120),
    ),
    T(
        "Women › Shoes › Fashion Sneakers",
        "women's sneaker",
        q="women's sneakers|white sneakers women",
        a="slip on|non slip|platform|lightweight|rubber sole|memory foam|canvas",
        o="color_apparel size_shoe",
        price=(25, 95),
    ),
    T(
        "Women › Shoes › Sandals › Flat",
        "women's sandal",
        q="women's sandals|flat sandals",
        a="open toe|ankle strap|arch support|non slip|for summer|comfortable|rubber sole",
        o="color_apparel size_shoe",
        price=(18, 70),
    ),
    T(
        "Men › Shoes › Boots › Work & Safety",
        "men's work boot",
        q="men's work boots|steel toe boots",
        a="steel toe|waterproof|slip resistant|leather|lace up|rubber sole|for construction",
        o="color_apparel size_shoe size_shoe_wide",
        price=(45, 160),
    ),
    T(
        "Women › Shoes › Slippers",
        "slipper",
        q="slippers|house slippers|slippers women",
        a="memory foam|non slip|faux fur|indoor outdoor|machine washable|open toe|rubber sole",
        o="color_apparel size_apparel",
        price=(12, 40),
    ),
    T(
        "Men › Accessories › Hats & Caps › Baseball Caps",
        "baseball cap",
        q="baseball cap|dad hat",
        a="adjustable|washed cotton|unstructured|breathable|for outdoor|low profile",
        o="color_apparel",
        price=(9, 30),
    ),
    T(
        "Women › Accessories › Hats & Caps › Skullies & Beanies",
        "beanie",
        q="beanie|winter hat",
        a="cable knit|fleece lined|warm|with pom pom|for winter|soft",
        o="color_apparel pack_apparel",
        price=(8, 28),
    ),
    T(
        "Women › Handbags & Wallets › Totes",
        "tote bag",
        q="tote bag|women's handbag",
        a="vegan leather|large capacity|with zipper|for work|water resistant"
        "|with laptop compartment",
        o="color_apparel",
        price=(20, 85),
    ),
    T(
        "Men › Accessories › Wallets, Card Cases & Money Organizers › Wallets",
        "men's wallet",
        q="men's wallet|rfid wallet",
        a="rfid blocking|genuine leather|slim|bifold|with id window|minimalist|gift box",
        o="color_apparel",
        price=(12, 55),
    ),
    T(
        "Men › Accessories › Belts",
        "men's belt",
        q="men's belt|leather belt",
        a="genuine leather|ratchet|adjustable|for dress|casual|with automatic buckle",
        o="color_apparel size_apparel",
        price=(12, 45),
    ),
    T(
        "Men › Accessories › Sunglasses & Eyewear Accessories › Sunglasses",
        "sunglasses",
        q="sunglasses|polarized sunglasses",
        a="polarized|uv protection|lightweight|for driving|square frame|unisex|with case",
        o="lens_color",
        price=(12, 80),
        plural="sunglasses",
    ),
    T(
        "Men › Watches › Wrist Watches",
        "men's watch",
        q="men's watch|men's wrist watch",
        a="water resistant|stainless steel|analog|quartz movement|leather strap|with date"
        "|luminous hands",
        o="metal_color",
        price=(25, 220),
        plural="men's watches",
    ),
    T(
        "Women › Jewelry › Necklaces › Pendants",
        "pendant necklace",
        q="necklace for women|pendant necklace",
        a="hypoallergenic|dainty|gift for women|adjustable chain|nickel free|with gift box",
        o="material_jewel length_chain",
        price=(12, 90),
    ),
    T(
        "Women › Jewelry › Earrings › Hoop",
        "hoop earrings",
        q="hoop earrings|gold hoop earrings",
        a="hypoallergenic|lightweight|for sensitive ears|chunky|nickel free|dainty",
        o="metal_color pack_apparel",
        price=(10, 60),
        plural="hoop earrings",
    ),
    T(
        "Women › Jewelry › Rings › Bands",
        "stacking ring",
        q="rings for women|stacking rings",
        a="hypoallergenic|stackable|minimalist|tarnish resistant|with cubic zirconia|comfort fit",
        o="material_jewel size_ring",
        price=(10, 70),
    ),
    T(
        "Women › Accessories › Scarves & Wraps › Fashion Scarves",
        "scarf",
        q="scarf for women|winter scarf",
        a="soft|lightweight|for winter|cashmere feel|oversized|with tassels",
        o="color_print",
        price=(9, 35),
        plural="scarves",
    ),
    T(
        "Boys › Clothing › Tops, Tees & Shirts › T-Shirts",
        "boys' t-shirt",
        q="boys t-shirts|kids graphic tee",
        a="short sleeve|cotton|tagless|crew neck|machine wash|soft",
        o="color_apparel size_kids pack_apparel",
        price=(7, 24),
    ),
    T(
        "Girls › Clothing › Dresses",
        "girls' dress",
        q="girls dresses|toddler girl dress",
        a="short sleeve|twirly|with pockets|floral print|for party|cotton",
        o="color_print size_kids",
        price=(12, 38),
        plural="girls' dresses",
    ),
)

CATEGORY = Category(
    name="fashion",
    root="Clothing, Shoes & Jewelry",
    brands=split(
        "Northline|Harbor & Pine|Vellum Street|Kestrel Athletic|Mara Lune|Bridgetown Denim"
        "|Corvo|Ashbury|Tallow & Thread|Linden Row|Ridgeway Outfitters|Pacer Lab|Solstice Swim"
        "|Quill & Fox|Ember Knit|Marigold Moon|Stonebridge|Alder Works|Brightwater|Oriel"
        "|Fenwick|Calla Rae|Tundra Trail|Ivy Parade|Gilded Sparrow|Wrenfield|Otto Vance"
        "|Coastal Drift|Sable & Co|Jubilee Kids|Halcyon|Meridian Watch Co"
    ),
    generic_attributes=attrs(
        "machine wash|hand wash|daily wear|high quality|comfortable|for women|for men"
        "|regular fit|easy care|gift idea"
    ),
    title_extras=split(
        "Casual|Classic|Everyday|Premium|Basic|Fashion|Vintage Style|Athletic"
        "|Holiday Gift|Lightweight"
    ),
    intros=split(
        "is cut for an easy, flattering fit|pairs with almost anything in your closet"
        "|is built for all-day comfort|keeps its shape wash after wash"
        "|was designed for work, weekends and travel"
    ),
    closings=split(
        "Please check the size chart before ordering.|Colors may vary slightly by screen."
        "|Machine wash cold, tumble dry low.|Free exchanges within 30 days."
        "|Imported.|Ships in a gift-ready box."
    ),
    types=TYPES,
)
