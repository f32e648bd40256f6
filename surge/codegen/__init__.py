"""Code generation: loop-IR kernel groups to kernel source, and the host wrapper."""
