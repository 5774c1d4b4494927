"""What the library keeps and the protocols it keeps it through: the typed values of generations,
comparisons, judgements, campaigns and evaluation runs, and one module of store protocols (``protocols``).

A layer of its own, below ``evaluation`` and above ``engine``: the service and the evaluation grid both
import it, and it imports neither. ``storage`` (outside the library) implements the protocols.
"""
