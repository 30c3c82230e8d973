"""Grocery & Gourmet Food: drinks, snacks, pantry staples, sweets."""

from __future__ import annotations

from .base import Category, T, attrs, split

TYPES = (
    T(
        "Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
        "ground coffee",
        q="ground coffee|medium roast coffee",
        a="single origin|organic|fair trade|100% arabica|low acid|fresh roasted|small batch",
        o="roast size_food_oz pack_grocery",
        price=(8, 40),
        plural="ground coffee",
    ),
    T(
        "Beverages › Coffee, Tea & Cocoa › Coffee › Single-Serve Capsules & Pods",
        "coffee pod",
        q="k cup coffee pods|coffee pods",
        a="compatible with keurig|recyclable|100% arabica|decaf|bold|organic",
        o="flavor_coffee size_pods",
        price=(10, 48),
    ),
    T(
        "Beverages › Coffee, Tea & Cocoa › Tea › Green",
        "green tea bag",
        q="green tea bags|green tea",
        a="organic|caffeine free|non gmo|individually wrapped|gluten free|kosher",
        o="flavor_tea size_bags",
        price=(4, 26),
    ),
    T(
        "Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
        "herbal tea",
        q="herbal tea|sleep tea|chamomile tea",
        a="caffeine free|organic|for sleep|non gmo|individually wrapped|with ginger",
        o="flavor_tea size_bags pack_grocery",
        price=(4, 28),
        plural="herbal teas",
    ),
    T(
        "Snacks & Sweets › Snack Food Bars › Protein Bars",
        "protein bar",
        q="protein bars|keto protein bar",
        a="high protein|low sugar|gluten free|keto friendly|plant based|non gmo|soy free",
        o="flavor_sweet pack_grocery",
        price=(12, 40),
    ),
    T(
        "Breakfast Foods › Cereals › Granola",
        "granola",
        q="granola|low sugar granola",
        a="gluten free|low sugar|high protein|with nuts|non gmo|keto friendly|whole grain",
        o="flavor_sweet size_food_oz pack_grocery",
        price=(5, 28),
        plural="granola",
    ),
    T(
        "Breakfast Foods › Cereals › Cold Cereals",
        "breakfast cereal",
        q="breakfast cereal|high protein cereal",
        a="high protein|low carb|gluten free|keto friendly|whole grain|no artificial flavors",
        o="flavor_sweet size_food_oz pack_grocery",
        price=(4, 30),
    ),
    T(
        "Snacks & Sweets › Chips & Crisps › Potato Chips",
        "potato chips",
        q="potato chips|kettle chips",
        a="kettle cooked|gluten free|non gmo|individually wrapped|low sodium|vegan",
        o="flavor_snack size_food_pack",
        price=(5, 32),
        plural="potato chips",
    ),
    T(
        "Snacks & Sweets › Nuts & Seeds › Mixed Nuts",
        "mixed nuts",
        q="mixed nuts|roasted nuts",
        a="dry roasted|unsalted|lightly salted|resealable bag|keto friendly|non gmo|raw",
        o="size_food_oz pack_grocery",
        price=(7, 36),
        plural="mixed nuts",
    ),
    T(
        "Snacks & Sweets › Trail Mix",
        "trail mix",
        q="trail mix|snack packs trail mix",
        a="individually wrapped|high protein|with dark chocolate|gluten free|no added sugar",
        o="size_food_pack",
        price=(6, 30),
        plural="trail mix",
    ),
    T(
        "Meat & Seafood › Jerky & Dried Meats › Beef Jerky",
        "beef jerky",
        q="beef jerky|jerky",
        a="high protein|grass fed|low sugar|gluten free|no preservatives|keto friendly",
        o="flavor_savory size_food_oz pack_grocery",
        price=(7, 38),
        plural="beef jerky",
    ),
    T(
        "Snacks & Sweets › Chocolate › Chocolate Bars",
        "dark chocolate bar",
        q="dark chocolate|chocolate bars",
        a="70% cacao|sugar free|vegan|fair trade|dairy free|keto friendly|single origin",
        o="flavor_sweet pack_grocery",
        price=(4, 30),
    ),
    T(
        "Snacks & Sweets › Candy › Gummy Candy",
        "gummy candy",
        q="gummy candy|gummy bears|sour gummies",
        a="vegan|gluten free|fat free|individually wrapped|no artificial colors|sugar free",
        o="flavor_fruit size_food_oz",
        price=(4, 25),
        plural="gummy candies",
    ),
    T(
        "Snacks & Sweets › Cookies",
        "cookie",
        q="cookies|chocolate chip cookies",
        a="soft baked|gluten free|individually wrapped|vegan|low sugar|made with real butter",
        o="flavor_sweet size_food_pack",
        price=(4, 30),
    ),
    T(
        "Snacks & Sweets › Crackers",
        "cracker",
        q="crackers|gluten free crackers",
        a="gluten free|whole grain|non gmo|low sodium|grain free|seed crackers",
        o="flavor_savory size_food_oz pack_grocery",
        price=(3, 24),
    ),
    T(
        "Snacks & Sweets › Popcorn",
        "popcorn",
        q="popcorn|microwave popcorn",
        a="non gmo|gluten free|whole grain|ready to eat|low calorie|kettle corn",
        o="flavor_snack size_food_pack",
        price=(4, 26),
        plural="popcorn",
    ),
    T(
        "Pantry Staples › Cooking & Baking › Oils, Vinegars & Salad Dressings › Olive Oils",
        "extra virgin olive oil",
        q="olive oil|extra virgin olive oil",
        a="cold pressed|first cold pressed|organic|single origin|non gmo|in glass bottle",
        o="size_food_oz pack_grocery",
        price=(8, 45),
        plural="extra virgin olive oils",
    ),
    T(
        "Pantry Staples › Pasta & Noodles › Dried Pasta",
        "pasta",
        q="pasta|gluten free pasta",
        a="gluten free|high protein|whole wheat|non gmo|bronze cut|chickpea",
        o="size_food_oz pack_grocery",
        price=(3, 24),
        plural="pasta",
    ),
    T(
        "Pantry Staples › Jarred & Canned Foods › Pasta Sauces",
        "pasta sauce",
        q="pasta sauce|marinara sauce",
        a="no sugar added|keto friendly|low sodium|non gmo|vegan|slow cooked",
        o="flavor_savory size_food_oz pack_grocery",
        price=(4, 30),
    ),
    T(
        "Pantry Staples › Condiments & Salad Dressings › Hot Sauce",
        "hot sauce",
        q="hot sauce|habanero hot sauce",
        a="small batch|extra hot|gluten free|gift set|no sugar added|fermented",
        o="size_food_oz pack_grocery",
        price=(5, 30),
    ),
    T(
        "Pantry Staples › Jams, Jellies & Sweet Spreads › Honey",
        "raw honey",
        q="honey|raw honey|manuka honey",
        a="raw|unfiltered|non gmo|pure|locally sourced|kosher|in glass jar",
        o="size_lb pack_grocery",
        price=(7, 50),
        plural="raw honey",
    ),
    T(
        "Pantry Staples › Jams, Jellies & Sweet Spreads › Nut Butters › Peanut Butter",
        "peanut butter",
        q="peanut butter|natural peanut butter",
        a="no sugar added|creamy|crunchy|organic|no palm oil|high protein|non gmo",
        o="size_food_oz pack_grocery",
        price=(4, 26),
        plural="peanut butter",
    ),
    T(
        "Breakfast Foods › Syrups › Maple Syrup",
        "maple syrup",
        q="maple syrup|pure maple syrup",
        a="100% pure|grade a|organic|dark robust|in glass bottle|non gmo",
        o="size_food_oz",
        price=(8, 40),
        plural="maple syrup",
    ),
    T(
        "Beverages › Bottled Beverages, Water & Drink Mixes › Sparkling Water",
        "sparkling water",
        q="sparkling water|flavored sparkling water",
        a="zero calorie|no sweeteners|naturally flavored|caffeine free|in cans|non gmo",
        o="flavor_fruit size_drink",
        price=(6, 30),
        plural="sparkling water",
    ),
    T(
        "Beverages › Energy Drinks",
        "energy drink",
        q="energy drink|sugar free energy drink",
        a="sugar free|zero calorie|with natural caffeine|keto friendly|vegan|with b vitamins",
        o="flavor_fruit size_drink",
        price=(12, 40),
    ),
    T(
        "Beverages › Sports Drinks › Powdered Drink Mixes",
        "electrolyte drink mix",
        q="electrolyte powder|hydration drink mix",
        a="sugar free|keto friendly|individually wrapped|non gmo|zero calorie|with vitamin c",
        o="flavor_fruit count",
        price=(10, 40),
    ),
    T(
        "Beverages › Coconut Water",
        "coconut water",
        q="coconut water|pure coconut water",
        a="no sugar added|non gmo|not from concentrate|organic|with pulp|gluten free",
        o="size_drink",
        price=(10, 36),
        plural="coconut water",
    ),
    T(
        "Pantry Staples › Herbs, Spices & Seasonings › Mixed Spices & Seasonings",
        "seasoning blend",
        q="seasoning blend|spice mix|bbq rub",
        a="salt free|gluten free|no msg|keto friendly|non gmo|small batch|gift set",
        o="flavor_savory size_food_oz",
        price=(4, 26),
    ),
    T(
        "Pantry Staples › Cooking & Baking › Baking Mixes › Pancake & Waffle Mixes",
        "pancake mix",
        q="pancake mix|protein pancake mix",
        a="high protein|gluten free|just add water|keto friendly|whole grain|buttermilk",
        o="size_food_oz pack_grocery",
        price=(4, 24),
        plural="pancake mixes",
    ),
    T(
        "Snacks & Sweets › Dried Fruits & Raisins › Mixed Dried Fruit",
        "dried fruit",
        q="dried fruit|dried mango",
        a="no sugar added|unsulfured|organic|non gmo|individually wrapped|freeze dried",
        o="flavor_fruit size_food_oz",
        price=(5, 30),
        plural="dried fruit",
    ),
    T(
        "Pantry Staples › Dried Beans, Grains & Rice › Rice",
        "basmati rice",
        q="basmati rice|jasmine rice|rice",
        a="aged|non gmo|long grain|gluten free|organic|quick cooking",
        o="size_lb pack_grocery",
        price=(5, 38),
        plural="basmati rice",
    ),
    T(
        "Beverages › Coffee, Tea & Cocoa › Coffee Creamers",
        "coffee creamer",
        q="coffee creamer|non dairy creamer",
        a="non dairy|sugar free|plant based|shelf stable|keto friendly|single serve",
        o="flavor_coffee size_pods",
        price=(4, 28),
    ),
    T(
        "Breakfast Foods › Oatmeal",
        "instant oatmeal",
        q="instant oatmeal|oatmeal packets",
        a="whole grain|high fiber|gluten free|low sugar|individually wrapped|high protein",
        o="flavor_sweet size_pods",
        price=(4, 24),
        plural="instant oatmeal",
    ),
    T(
        "Snacks & Sweets › Rice Cakes",
        "rice cake",
        q="rice cakes|mini rice cakes",
        a="gluten free|low calorie|whole grain|non gmo|lightly salted|vegan",
        o="flavor_snack pack_grocery",
        price=(3, 22),
    ),
)

CATEGORY = Category(
    name="grocery",
    root="Grocery & Gourmet Food",
    brands=split(
        "Golden Acre|Hillside Pantry|Kettle & Crumb|Rowan Farms|Blue Harvest|Sunpeak|Old Mill Road"
        "|Morning Ridge|Little Orchard|Marisol Kitchen|Fieldstone Provisions|Bramble & Bean"
        "|Cascade Roasters|Saltmarsh|Honeyvale|Pinecrest Foods|Tidewater Tea Co|Verde Valley"
        "|Northstar Nutrition|Copper Pot|Prairie Sky|Lemongrass Lane|Windward|Red Barn Snacks"
        "|Hearth & Harvest|Cloudberry|Summit Fuel|Olivara|Wild Thyme"
    ),
    generic_attributes=attrs(
        "gluten free|non gmo|low sugar|keto friendly|kosher|vegan|with natural ingredients"
        "|high protein|low calorie|dairy free"
    ),
    title_extras=split(
        "Family Size|Snack Pack|Value Pack|Gourmet|Healthy Snack|Pantry Staple|Bulk"
        "|Gift Basket Favorite|Farm Fresh|Artisan"
    ),
    intros=split(
        "is made from simple ingredients you can pronounce"
        "|tastes like it came from a family kitchen"
        "|fits busy mornings, lunch boxes and late-night cravings"
        "|is prepared in small batches for consistent flavor"
        "|was created for people who read the label"
    ),
    closings=split(
        "Store in a cool, dry place.|Produced in a facility that also handles tree nuts."
        "|Best before date printed on the package.|Refrigerate after opening."
        "|Packaging may vary.|Satisfaction guaranteed or your money back."
    ),
    types=TYPES,
)
