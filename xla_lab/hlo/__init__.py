"""Reading XLA's HLO: the text parser, call stacks from the binary dump, and the analyses built on them."""
