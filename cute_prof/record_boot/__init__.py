"""The folder ``cute-prof record`` puts first on the program's ``PYTHONPATH``: its
``sitecustomize`` starts the run (:func:`cute_prof.record_run.start`) when Python starts, then
runs any other ``sitecustomize`` the program's environment has. Nothing imports this package.

Owns the start-up hook alone; it may import only :mod:`cute_prof.record_run`.
"""
