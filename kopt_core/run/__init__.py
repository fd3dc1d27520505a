"""A run folder: its state.json / stop.json / env.json (store), layout, creation (init), summary and
status."""
