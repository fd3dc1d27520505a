"""The steps of kopt's loop, each a function the CLI (and any embedding tool) calls."""
