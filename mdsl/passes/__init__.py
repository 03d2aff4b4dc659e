"""Reserved for the passes stage (see DESIGN.md)."""
