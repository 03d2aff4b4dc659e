"""Reserved for the codegen stage (see DESIGN.md)."""
