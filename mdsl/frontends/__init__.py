"""Reserved for the frontends stage (see DESIGN.md)."""
