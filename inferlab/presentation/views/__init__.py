"""The report's per-stage views: ``<stage>.py`` is what that stage shows on report/index.html
(``inferlab.presentation.sections`` says what a view exposes and what it is handed)."""
