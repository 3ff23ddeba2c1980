"""Reading XLA's HLO text (the parser grows here; see instructions.py for what exists now)."""
