"""Runtime: on-disk caches of compiled code, kernel loading, launch and autotuning."""
