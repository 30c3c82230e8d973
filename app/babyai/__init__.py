"""BabyAI (minigrid's levels) as a text environment, served over AgentGym's BabyAI protocol:
:mod:`.game` plays an episode in words, :mod:`.server` serves episodes over HTTP."""
