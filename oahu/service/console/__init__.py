"""The web console served by ``oahu run`` at ``/``: a live view of the model learning, a
retrieval explorer and an annotation page that teaches the model (:func:`add_console`).

Pages are static HTML and JavaScript shipped inside the package (``static/``, no CDN: the
console works offline); they read small JSON endpoints under ``/v1/console``.
"""

from oahu.service.console.routes import add_console

__all__ = ["add_console"]
