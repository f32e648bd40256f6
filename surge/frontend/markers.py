"""Functions users call in their code to steer capture; the frontend knows them by identity.

They live here, below the top tier, so that the frontend's rules for them need not import
``surge.api``, which re-exports them as ``surge.graph_break`` and so on.
"""


def graph_break() -> None:
    """Does nothing when run eagerly; inside compiled code it splits the graph there: the
    code before it and the code after it are captured as separate graphs."""
