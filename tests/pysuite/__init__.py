"""CPython's own test suite run under surge, each test method compared with eager."""
