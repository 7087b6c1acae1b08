"""Redis I/O: see CONTRIBUTING.md, "How the layers fit"."""
