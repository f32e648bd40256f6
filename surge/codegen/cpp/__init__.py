"""C++/OpenMP code generation for CPUs, from the same scheduled groups as the Triton backend."""
