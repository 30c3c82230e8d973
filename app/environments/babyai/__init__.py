"""BabyAI: reach or handle the objects a mission names in a grid world, played as text."""
