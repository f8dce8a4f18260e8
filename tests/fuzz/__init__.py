"""Seeded interleaving fuzz of the OM engine in one process (issue 6, behaviour §12 and §13.12 item 8)."""
