"""Home, furniture, lighting, décor and the garden (WebShop's "garden" category).

Paths here carry their own store root (Home & Kitchen, Patio, Lawn & Garden, Tools &
Home Improvement), so the category root is empty.
"""

from __future__ import annotations

from .base import Category, T, attrs, split

HK = "Home & Kitchen › "
PATIO = "Patio, Lawn & Garden › "
TOOLS = "Tools & Home Improvement › "

TYPES = (
    T(
        HK + "Furniture › Living Room Furniture › Sofas & Couches",
        "sofa",
        q="sofa|couch for living room|loveseat",
        a="for living room|mid century|easy assemble|with storage|velvet|tufted back"
        "|solid wood legs|for small spaces",
        o="color_home material_fabric",
        price=(180, 900),
    ),
    T(
        HK + "Furniture › Living Room Furniture › Tables › Coffee Tables",
        "coffee table",
        q="coffee table|coffee table for living room",
        a="for living room|with storage|mid century|solid wood|easy assemble|lift top"
        "|metal frame|rustic",
        o="finish material_furn",
        price=(60, 350),
    ),
    T(
        HK + "Furniture › Living Room Furniture › Tables › End Tables",
        "end table",
        q="end table|side table|nightstand end table",
        a="with charging station|with drawer|for small spaces|easy assemble|metal frame"
        "|for living room|industrial",
        o="finish set_count",
        price=(30, 160),
    ),
    T(
        HK + "Furniture › Living Room Furniture › Television Stands & Entertainment Centers",
        "tv stand",
        q="tv stand|entertainment center",
        a="with storage|for 65 inch tv|with led lights|farmhouse|for living room|engineered wood"
        "|easy assemble",
        o="finish",
        price=(70, 400),
    ),
    T(
        HK + "Furniture › Home Office Furniture › Bookcases",
        "bookshelf",
        q="bookshelf|bookcase|ladder shelf",
        a="5 tier|industrial|metal frame|for home office|easy assemble|space saving|open shelf",
        o="finish",
        price=(40, 220),
        plural="bookshelves",
    ),
    T(
        HK + "Furniture › Home Office Furniture › Home Office Chairs › Desk Chairs",
        "office chair",
        q="office chair|desk chair|ergonomic chair",
        a="ergonomic|lumbar support|with headrest|mesh back|adjustable height|swivel"
        "|for home office|heavy duty",
        o="color_home",
        price=(60, 350),
    ),
    T(
        HK + "Furniture › Home Office Furniture › Home Office Desks",
        "computer desk",
        q="computer desk|writing desk|standing desk",
        a="for home office|with drawers|height adjustable|easy assemble|with monitor shelf"
        "|for small spaces|l shaped",
        o="finish",
        price=(60, 400),
    ),
    T(
        HK + "Furniture › Kitchen & Dining Room Furniture › Chairs",
        "dining chair",
        q="dining chairs|dining chairs set of 4|kitchen chairs",
        a="for dining room|upholstered|mid century|with metal legs|easy assemble|armless"
        "|faux leather",
        o="color_home set_count",
        price=(60, 380),
    ),
    T(
        HK + "Furniture › Kitchen & Dining Room Furniture › Bar Stools",
        "bar stool",
        q="bar stools|counter height stools",
        a="counter height|swivel|with back|adjustable height|faux leather|for kitchen island",
        o="color_home set_count",
        price=(50, 300),
    ),
    T(
        HK + "Furniture › Bedroom Furniture › Beds, Frames & Bases › Bed Frames",
        "bed frame",
        q="bed frame|platform bed frame|queen bed frame",
        a="with headboard|with storage|no box spring needed|noise free|metal frame|easy assemble"
        "|solid wood|for bedroom",
        o="size_bed finish",
        price=(90, 600),
    ),
    T(
        HK + "Furniture › Bedroom Furniture › Mattresses & Box Springs › Mattresses",
        "mattress",
        q="mattress|memory foam mattress|queen mattress",
        a="memory foam|medium firm|cooling gel|hybrid|pressure relief|for back pain"
        "|fiberglass free",
        o="size_bed",
        price=(150, 900),
        plural="mattresses",
    ),
    T(
        HK + "Furniture › Bedroom Furniture › Nightstands",
        "nightstand",
        q="nightstand|bedside table",
        a="with drawer|with charging station|for bedroom|mid century|easy assemble"
        "|with open shelf|solid wood",
        o="finish set_count",
        price=(35, 200),
    ),
    T(
        HK + "Furniture › Bedroom Furniture › Dressers",
        "dresser",
        q="dresser|dresser for bedroom|chest of drawers",
        a="6 drawer|for bedroom|with metal handles|easy assemble|fabric bins|solid wood|tall",
        o="finish",
        price=(80, 500),
    ),
    T(
        HK + "Home Décor Products › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
        "throw pillow cover",
        q="throw pillow covers|pillow covers",
        a="for couch|boho|with hidden zipper|machine washable|for living room|linen blend"
        "|farmhouse",
        o="color_home size_pillow pattern",
        price=(9, 40),
    ),
    T(
        HK + "Bedding › Blankets & Throws › Throws",
        "throw blanket",
        q="throw blanket|fleece blanket",
        a="soft|for couch|machine washable|lightweight|sherpa|fuzzy|all season",
        o="color_home",
        price=(15, 60),
    ),
    T(
        HK + "Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets",
        "sheet set",
        q="bed sheets|sheet set|queen sheets",
        a="deep pocket|cooling|wrinkle free|breathable|100% cotton|soft|machine washable",
        o="size_bed color_home",
        price=(20, 120),
    ),
    T(
        HK + "Bedding › Comforters & Sets › Comforter Sets",
        "comforter set",
        q="comforter set|queen comforter|duvet insert",
        a="all season|lightweight|machine washable|down alternative|reversible|with pillow shams",
        o="size_bed color_home",
        price=(35, 180),
    ),
    T(
        HK + "Home Décor Products › Area Rugs, Runners & Pads › Area Rugs",
        "area rug",
        q="area rug|rug for living room|washable rug",
        a="machine washable|non slip|for living room|low pile|non shedding|boho|for bedroom"
        "|stain resistant",
        o="size_rug color_home",
        price=(25, 300),
    ),
    T(
        HK + "Home Décor Products › Window Treatments › Curtains & Drapes",
        "blackout curtain",
        q="blackout curtains|curtains for bedroom|living room curtains",
        a="thermal insulated|room darkening|for bedroom|grommet top|noise reducing"
        "|for living room|energy saving",
        o="size_curtain color_home",
        price=(18, 80),
    ),
    T(
        HK + "Wall Art › Posters & Prints",
        "canvas wall art",
        q="wall art|canvas wall art|wall decor",
        a="ready to hang|framed|for living room|abstract|for bedroom|high definition|boho",
        o="size_wall pattern",
        price=(20, 150),
        plural="canvas wall art",
    ),
    T(
        TOOLS + "Lighting & Ceiling Fans › Lamps & Shades › Table Lamps",
        "table lamp",
        q="table lamp|bedside lamp",
        a="with usb port|dimmable|touch control|for bedroom|for living room|with fabric shade"
        "|set of 2",
        o="color_home pack_home",
        price=(20, 120),
    ),
    T(
        TOOLS + "Lighting & Ceiling Fans › Lamps & Shades › Floor Lamps",
        "floor lamp",
        q="floor lamp|standing lamp",
        a="dimmable|with remote control|for living room|arc|led|with shelves|tall",
        o="color_home",
        price=(30, 180),
    ),
    T(
        TOOLS + "Lighting & Ceiling Fans › Ceiling Lights › Flush Mount Lights",
        "flush mount ceiling light",
        q="ceiling light|flush mount light",
        a="led|dimmable|for bedroom|easy install|modern|for hallway|energy saving",
        o="color_temp color_home",
        price=(20, 150),
    ),
    T(
        TOOLS + "Light Bulbs › LED Bulbs",
        "led light bulb",
        q="led light bulbs|a19 led bulbs",
        a="dimmable|energy saving|long lasting|e26 base|non dimmable|ul listed",
        o="color_temp bulb_watt pack_home",
        price=(8, 40),
    ),
    T(
        HK + "Bath › Bathroom Accessories › Shower Curtains, Hooks & Liners › Shower Curtains",
        "shower curtain",
        q="shower curtain|fabric shower curtain",
        a="waterproof|machine washable|with hooks|mildew resistant|extra long|boho",
        o="color_home pattern",
        price=(12, 45),
    ),
    T(
        HK + "Bath › Towels › Towel Sets",
        "bath towel set",
        q="bath towels|towel set",
        a="100% cotton|highly absorbent|quick dry|soft|hotel quality|machine washable",
        o="color_home size_towel",
        price=(18, 80),
    ),
    T(
        HK + "Storage & Organization › Baskets, Bins & Containers › Storage Baskets",
        "storage basket",
        q="storage baskets|woven basket|storage bins",
        a="with handles|foldable|for shelves|woven|for closet|with lid|for nursery",
        o="color_home set_count",
        price=(12, 60),
    ),
    T(
        HK + "Storage & Organization › Clothing & Closet Storage › Shoe Organizers",
        "shoe rack",
        q="shoe rack|shoe organizer",
        a="4 tier|stackable|for entryway|metal frame|easy assemble|space saving|bamboo",
        o="finish",
        price=(18, 90),
    ),
    T(
        HK + "Home Décor Products › Shelves › Floating Shelves",
        "floating shelf",
        q="floating shelves|wall shelves",
        a="wall mounted|rustic|solid wood|for bathroom|set of 3|easy install|with towel bar",
        o="finish set_count",
        price=(15, 70),
        plural="floating shelves",
    ),
    T(
        HK + "Home Décor Products › Mirrors › Wall-Mounted Mirrors",
        "wall mirror",
        q="wall mirror|bathroom mirror|full length mirror",
        a="wall mounted|shatter proof|round|for bathroom|full length|with metal frame|arched",
        o="color_home",
        price=(25, 200),
    ),
    T(
        HK + "Home Décor Products › Artificial Plants & Flowers › Artificial Plants",
        "artificial plant",
        q="artificial plants|fake plants",
        a="realistic|in pot|for home decor|uv resistant|for office|no maintenance|tall",
        o="size_pot pack_home",
        price=(12, 90),
    ),
    T(
        PATIO + "Gardening & Lawn Care › Pots, Planters & Container Accessories › Planters",
        "planter",
        q="plant pots|planters for indoor plants",
        a="with drainage hole|ceramic|for indoor plants|with saucer|mid century|set of 3"
        "|for succulents",
        o="size_pot color_home",
        price=(12, 70),
    ),
    T(
        PATIO + "Watering Equipment › Garden Hoses",
        "garden hose",
        q="garden hose|expandable garden hose",
        a="expandable|leak proof|kink free|with spray nozzle|heavy duty|lightweight",
        o="size_hose",
        price=(20, 90),
    ),
    T(
        PATIO + "Patio Furniture & Accessories › Patio Furniture Sets › Conversation Sets",
        "patio furniture set",
        q="patio furniture set|outdoor furniture|patio conversation set",
        a="weather resistant|with cushions|for backyard|all weather wicker|easy assemble|for porch",
        o="color_home",
        price=(150, 900),
    ),
    T(
        PATIO + "Outdoor Décor › Outdoor String Lights",
        "outdoor string lights",
        q="outdoor string lights|patio lights",
        a="waterproof|shatterproof|dimmable|for patio|connectable|with edison bulbs|solar powered",
        o="size_hose color_temp",
        price=(18, 80),
        plural="outdoor string lights",
    ),
    T(
        PATIO + "Outdoor Décor › Outdoor Lighting › Pathway Lights",
        "solar pathway light",
        q="solar lights outdoor|pathway lights",
        a="solar powered|waterproof|auto on off|for yard|for garden|warm white|stainless steel",
        o="pack_home color_temp",
        price=(15, 70),
    ),
    T(
        PATIO + "Birding & Wildlife › Bird Feeders",
        "bird feeder",
        q="bird feeder|hanging bird feeder",
        a="squirrel proof|for outside|hanging|easy clean|large capacity|weatherproof",
        o="color_home",
        price=(12, 60),
    ),
    T(
        PATIO + "Gardening & Lawn Care › Raised Garden Beds",
        "raised garden bed",
        q="raised garden bed|garden bed kit",
        a="galvanized steel|for vegetables|easy assemble|cedar wood|for outdoor|large",
        o="finish size_pot",
        price=(40, 220),
    ),
)

CATEGORY = Category(
    name="garden",
    root="",
    brands=split(
        "Hearthwood|Maple & Main|Linnea Home|Brookstone Living|Oakridge Casa|Willow Hollow"
        "|Terrace Lane|Gablecraft|Nestwell|Lumina House|Palisade Outdoor|Cottonfield Home"
        "|Ferncliff|Grainhouse|Bellmont|Quiet Harbor|Norrland|Sunbrook Garden|Copper Kettle Home"
        "|Westhaven|Amberwood|Lark & Lantern|Juniper Row|Stonecrest|Mistral Home|Heron Bay"
        "|Riverbend Goods|Oakleaf & Co|Mossgrove|Thistledown"
    ),
    generic_attributes=attrs(
        "easy assemble|easy clean|for living room|for bedroom|heavy duty|space saving"
        "|high quality|easy install|modern|for home decor"
    ),
    title_extras=split(
        "Modern|Farmhouse|Mid-Century|Minimalist|Boho|Industrial|Scandinavian"
        "|Contemporary|Rustic|Classic"
    ),
    intros=split(
        "makes any room feel finished|was designed to fit real homes and real routines"
        "|brings warmth and order to your space|is made from carefully chosen materials"
        "|blends clean lines with everyday practicality"
    ),
    closings=split(
        "All hardware and instructions are included.|Wipe clean with a damp cloth."
        "|Ships in one box.|Backed by a 1-year warranty.|Colors may vary slightly by screen."
        "|Our support team answers within 24 hours."
    ),
    types=TYPES,
)
