"""Reserved for the runtime stage (see DESIGN.md)."""
