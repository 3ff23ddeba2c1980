"""Views render captures; they never reach into torch_xla."""
