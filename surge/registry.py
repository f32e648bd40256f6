"""Per-key rule tables, the shape every registry in surge shares.

``register = rule_registrar(TABLE)`` gives a decorator factory:
``@register(key_a, key_b)`` on a rule makes it the rule of both keys.
"""
from __future__ import annotations


def rule_registrar(table: dict):
    def register(*keys):
        def add(rule):
            for key in keys:
                table[key] = rule
            return rule
        return add
    return register
