"""Audit mode: check and score other people's MLPerf Training submission packages.

The modules each do one job: ``discover`` walks a package, ``engine`` runs the official compliance
checker as it ships (``mlrepro.core.checker``) on one file, with ``fastpath``'s tested speed-ups in the
check's worker processes unless they are turned off (``audit_fast_paths``), ``runfile`` extracts
everything else the audit needs from the same parse,
``cache``/``check`` spread files over a process pool with a content-hash cache, ``rcp``,
``scoring`` and ``package`` give the per-organisation verdicts, ``result_ids`` the official result
IDs (derived, or read from a published table), ``summary`` writes the CSV/JSON and
``report`` the HTML pages; ``pipeline`` ties them together for ``rules/audit.smk``.
"""
