"""Differences between surge and eager that the CI sample finds today, with their cause.

module -> {(Class.method, variant): cause}. Each is a surge bug (a repro is in the
cause or in tests/fuzz/corpus); fix it, then take it off this list.
"""

DIFFERENCES: dict[str, dict[tuple[str, str], str]] = {
}
