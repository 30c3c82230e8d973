"""Electronics: audio, computers and accessories, phones, cameras, TV and smart home."""

from __future__ import annotations

from .base import Category, T, attrs, split

TYPES = (
    T(
        "Headphones, Earbuds & Accessories › Earbuds",
        "wireless earbuds",
        q="wireless earbuds|bluetooth earbuds",
        a="noise cancelling|wireless bluetooth|with charging case|waterproof|long battery life"
        "|with microphone|for running|touch control",
        o="color_device style_device",
        price=(15, 180),
        plural="wireless earbuds",
    ),
    T(
        "Headphones, Earbuds & Accessories › Headphones › Over-Ear Headphones",
        "over ear headphones",
        q="over ear headphones|noise cancelling headphones",
        a="noise cancelling|wireless bluetooth|foldable|with microphone|hi-fi stereo"
        "|memory foam ear cushions|long battery life",
        o="color_device style_device",
        price=(25, 300),
        plural="over ear headphones",
    ),
    T(
        "Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
        "bluetooth speaker",
        q="bluetooth speaker|portable speaker|waterproof speaker",
        a="waterproof|wireless bluetooth|portable|loud stereo sound|with bass boost"
        "|long battery life|for outdoor",
        o="color_device",
        price=(20, 160),
    ),
    T(
        "Home Audio › Speakers › Sound Bars",
        "sound bar",
        q="sound bar|soundbar for tv",
        a="with subwoofer|wireless bluetooth|dolby atmos|for tv|home theater|with remote control"
        "|optical input",
        o="style_device",
        price=(50, 400),
    ),
    T(
        "Television & Video › Televisions",
        "smart tv",
        q="smart tv|4k tv|led tv",
        a="4k uhd|hdr|with voice remote|high definition|wall mountable|with built in streaming",
        o="size_screen",
        price=(150, 1200),
    ),
    T(
        "Computers & Accessories › Monitors",
        "computer monitor",
        q="computer monitor|gaming monitor",
        a="ips panel|144hz|eye care|with built in speakers|frameless|height adjustable"
        "|for home office|usb c",
        o="size_screen resolution",
        price=(90, 600),
    ),
    T(
        "Computers & Accessories › Computer Accessories & Peripherals › Mice",
        "wireless mouse",
        q="wireless mouse|ergonomic mouse",
        a="ergonomic|silent click|rechargeable|usb receiver|wireless bluetooth|for laptop"
        "|adjustable dpi",
        o="color_device",
        price=(10, 80),
        plural="wireless mice",
    ),
    T(
        "Computers & Accessories › Computer Accessories & Peripherals › Keyboards",
        "mechanical keyboard",
        q="mechanical keyboard|gaming keyboard|wireless keyboard",
        a="rgb backlit|hot swappable|wireless bluetooth|compact|with wrist rest|quiet keys"
        "|for mac and windows",
        o="color_device style_device",
        price=(30, 200),
    ),
    T(
        "Computers & Accessories › Cables & Interconnects › USB Cables",
        "usb c cable",
        q="usb c cable|usb c charging cable|fast charging cable",
        a="fast charging|braided|high speed|durable|data transfer|for android",
        o="length_cable pack_electronics connector",
        price=(6, 30),
    ),
    T(
        "Accessories & Supplies › Audio & Video Accessories › Cables › HDMI Cables",
        "hdmi cable",
        q="hdmi cable|8k hdmi cable",
        a="high speed|4k|braided|gold plated|for gaming|with ethernet",
        o="length_cable pack_electronics",
        price=(6, 35),
    ),
    T(
        "Cell Phones & Accessories › Chargers & Power Adapters › Wall Chargers",
        "wall charger",
        q="phone charger|usb c charger|fast charger",
        a="fast charging|dual port|foldable plug|compact|usb c|for iphone",
        o="color_device pack_electronics",
        price=(8, 45),
    ),
    T(
        "Cell Phones & Accessories › Portable Power Banks",
        "power bank",
        q="power bank|portable charger",
        a="fast charging|usb c|slim|with led display|for travel|high capacity",
        o="capacity_battery color_device",
        price=(15, 80),
    ),
    T(
        "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        "phone case",
        q="phone case|iphone case|clear phone case",
        a="shockproof|slim fit|with screen protector|clear|magnetic|with card holder"
        "|military grade drop protection",
        o="phone_model color_device",
        price=(7, 40),
    ),
    T(
        "Cell Phones & Accessories › Screen Protectors",
        "screen protector",
        q="screen protector|tempered glass screen protector",
        a="tempered glass|bubble free|easy install|case friendly|anti fingerprint|privacy",
        o="phone_model pack_electronics",
        price=(5, 25),
    ),
    T(
        "Wearable Technology › Smartwatches",
        "smart watch",
        q="smart watch|fitness smart watch",
        a="with heart rate monitor|waterproof|with sleep tracking|for android and iphone"
        "|long battery life|with gps",
        o="color_device band_size",
        price=(30, 300),
        plural="smart watches",
    ),
    T(
        "Wearable Technology › Accessories › Bands",
        "watch band",
        q="watch band|apple watch band",
        a="silicone|breathable|adjustable|stainless steel|quick release|for women|for men",
        o="band_size color_device",
        price=(6, 30),
    ),
    T(
        "Computers & Accessories › Computer Accessories & Peripherals › Webcams",
        "webcam",
        q="webcam|webcam with microphone",
        a="1080p|with microphone|plug and play|auto focus|with privacy cover|wide angle",
        o="resolution",
        price=(20, 120),
    ),
    T(
        "Computers & Accessories › Memory Cards › Micro SD Cards",
        "micro sd card",
        q="micro sd card|memory card",
        a="high speed|with adapter|for nintendo switch|for dash cam|class 10|4k video",
        o="capacity_storage pack_electronics",
        price=(6, 90),
    ),
    T(
        "Computers & Accessories › Data Storage › USB Flash Drives",
        "usb flash drive",
        q="usb flash drive|thumb drive",
        a="usb 3.0|high speed|metal|with keychain|plug and play|usb c",
        o="capacity_storage pack_electronics",
        price=(6, 60),
    ),
    T(
        "Computers & Accessories › Data Storage › External Solid State Drives",
        "portable ssd",
        q="portable ssd|external hard drive|external ssd",
        a="usb c|high speed|shock resistant|compact|for mac and pc|rugged",
        o="capacity_storage color_device",
        price=(40, 250),
    ),
    T(
        "Computers & Accessories › Networking Products › Routers",
        "wifi router",
        q="wifi router|wifi 6 router|mesh wifi",
        a="wifi 6|dual band|gigabit|easy setup|with parental controls|long range",
        o="style_device",
        price=(35, 300),
    ),
    T(
        "Security & Surveillance › Surveillance Cameras › Dome Cameras",
        "security camera",
        q="security camera|outdoor security camera|indoor camera",
        a="night vision|motion detection|two way audio|wireless|weatherproof|with cloud storage|2k",
        o="pack_electronics color_device",
        price=(20, 200),
    ),
    T(
        "Car & Vehicle Electronics › Car Electronics › Dash Cams",
        "dash cam",
        q="dash cam|dash camera for cars",
        a="front and rear|night vision|loop recording|wide angle|with g sensor|parking monitor",
        o="resolution",
        price=(30, 180),
    ),
    T(
        "Television & Video › Television Accessories › TV Mounts",
        "tv wall mount",
        q="tv wall mount|full motion tv mount",
        a="full motion|tilting|heavy duty|easy install|for 32-75 inch tvs|low profile",
        o="style_device",
        price=(18, 90),
    ),
    T(
        "Television & Video › Television Accessories › Remote Controls",
        "universal remote control",
        q="universal remote|remote control for tv",
        a="backlit|easy setup|with voice control|batteries included|replacement|learning",
        o="pack_electronics",
        price=(8, 45),
    ),
    T(
        "Computers & Accessories › Tablet Accessories › Cases",
        "tablet case",
        q="tablet case|ipad case",
        a="with pencil holder|auto sleep wake|shockproof|trifold stand|slim|with keyboard",
        o="size_tablet color_device",
        price=(10, 60),
    ),
    T(
        "Computers & Accessories › Laptop Accessories › Bags, Cases & Sleeves › Sleeves",
        "laptop sleeve",
        q="laptop sleeve|laptop case",
        a="water resistant|shockproof|with pocket|slim|for macbook|padded",
        o="size_laptop color_device",
        price=(10, 45),
    ),
    T(
        "Cell Phones & Accessories › Car Accessories › Car Cradles & Mounts",
        "car phone mount",
        q="car phone holder|phone mount for car",
        a="magnetic|one touch|for dashboard|for air vent|360 degree rotation|strong suction",
        o="style_device",
        price=(8, 40),
    ),
    T(
        "Video Games › PC › Accessories › Headsets",
        "gaming headset",
        q="gaming headset|headset with mic",
        a="with noise cancelling mic|surround sound|rgb|for ps5|for pc|memory foam|wired",
        o="color_device",
        price=(18, 150),
    ),
    T(
        "Camera & Photo › Video › Sports & Action Video Cameras",
        "action camera",
        q="action camera|4k action camera",
        a="waterproof|4k|with image stabilization|wide angle|with accessories kit|wifi",
        o="style_device",
        price=(40, 350),
    ),
    T(
        "Camera & Photo › Tripods & Monopods › Tripods",
        "tripod",
        q="tripod|camera tripod|phone tripod",
        a="lightweight|with remote|aluminum alloy|extendable|for phone and camera|with ball head",
        o="color_device",
        price=(15, 120),
    ),
    T(
        "Camera & Photo › Lighting & Studio › Ring Lights",
        "ring light",
        q="ring light|ring light with stand",
        a="with tripod stand|with phone holder|dimmable|usb powered|for makeup|for live stream",
        o="size_tablet",
        price=(15, 90),
    ),
    T(
        "Television & Video › Projectors › Video Projectors",
        "portable projector",
        q="projector|mini projector|outdoor projector",
        a="1080p|wifi|wireless bluetooth|portable|for outdoor movies|home theater",
        o="style_device color_device",
        price=(60, 400),
    ),
    T(
        "Accessories & Supplies › Power Protection › Surge Protectors",
        "surge protector power strip",
        q="surge protector|power strip",
        a="with usb ports|flat plug|wall mountable|etl listed|6 outlet|for home office",
        o="length_cable color_device",
        price=(10, 50),
    ),
)

CATEGORY = Category(
    name="electronics",
    root="Electronics",
    brands=split(
        "Voltera|Nexwave|Aurion Audio|Quantix|Brightline|Soundforge|Tekbay|Lumetric|Corvax"
        "|Halo Digital|Ampere & Co|Zentrix|Pixelcraft|Ironclad Tech|Skylark Electronics|Orbit"
        "|Sonique|Kinetix|Vantage Point|Arclight|Nimbus Labs|Fluxcore|Everpeak|Beacon Audio"
        "|Stratos|Keystone Tech|Radiant Optics|Cobaltline|Wavecrest|Polaris Gear"
    ),
    generic_attributes=attrs(
        "easy use|high quality|easy install|portable|long lasting|high speed|plug and play"
        "|lightweight|compact|for home office"
    ),
    title_extras=split(
        "2024 Upgraded|Latest Version|Compatible with iPhone and Android|Plug and Play"
        "|Travel Ready|Gift for Him|Universal|Premium Edition|Pro Series|New Model"
    ),
    intros=split(
        "is engineered for reliable everyday performance|sets up in minutes, no tools required"
        "|packs flagship features into a compact design"
        "|was tested for durability before it left the factory"
        "|works with the devices you already own"
    ),
    closings=split(
        "Includes a 12-month warranty and lifetime support.|What's in the box: device,"
        " cable and user manual.|Firmware updates are free.|Please check compatibility before"
        " ordering.|FCC and CE certified.|Contact us any time; we reply within 24 hours."
    ),
    types=TYPES,
)
