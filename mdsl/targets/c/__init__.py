"""The C target: Kernel IR rendered as C, built by the system C compiler, loaded by cffi."""
