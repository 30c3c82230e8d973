"""WebShop's agent side: its prompt and reply grammar (:mod:`.agent`) and its openings
(:mod:`.opening`). The env server it plays is ``app/webshop``."""
