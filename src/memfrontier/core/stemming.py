"""nltk's Porter stemmer (the one BM25, the token F1 and BudgetMem's keywords share), imported
without the scientific stack.

``import nltk.stem`` runs nltk's package ``__init__``, which imports every nltk subpackage; two
of them probe optional integrations at import time (``nltk.metrics.association`` imports
``scipy.stats`` for ``fisher_exact``, ``nltk.classify.scikitlearn`` imports scikit-learn, which
imports pandas). Those probes cost 2-4 s of a ~4 s import on the development box, for a stemmer
that uses neither: more than a whole ``memfrontier search`` should take.

:func:`porter_stemmer` therefore imports nltk, the first time, with those packages hidden (a
``None`` entry in ``sys.modules`` is what Python reads as "not installed", and nltk takes its
documented fallbacks), then removes the entries: in this process nltk's ``fisher_exact`` and
``SklearnClassifier`` are unavailable, which nothing in memfrontier uses; ``scipy.stats``,
``sklearn`` and ``pandas`` themselves import normally afterwards. Nothing is hidden when nltk is
already imported, nor a package that already is (its cost is paid).
"""

from __future__ import annotations

import sys
import threading
from functools import lru_cache

#: Packages nltk's ``__init__`` probes at import time and the Porter stemmer does not need.
NLTK_OPTIONAL_PROBES = ("scipy.stats", "sklearn", "pandas")

_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def porter_stemmer():
    """A shared ``nltk.stem.porter.PorterStemmer()`` (NLTK_EXTENSIONS mode, nltk's default)."""
    with _LOCK:
        hide = [] if "nltk" in sys.modules else [m for m in NLTK_OPTIONAL_PROBES if m not in sys.modules]
        for name in hide:
            sys.modules[name] = None  # type: ignore[assignment]
        try:
            from nltk.stem.porter import PorterStemmer
        finally:
            for name in hide:
                if sys.modules.get(name, 0) is None:
                    del sys.modules[name]
        return PorterStemmer()


__all__ = ["NLTK_OPTIONAL_PROBES", "porter_stemmer"]
