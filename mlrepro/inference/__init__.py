"""MLPerf Inference: the mini models served through the official LoadGen, packaged, checked and reported,
and an audit of published inference rounds.

- :mod:`settings`: scenarios, LoadGen model names, user.conf (official minimums or shortened)
- :mod:`summary`: LoadGen's ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt`` read into records
- :mod:`serve`: a checkpoint as a LoadGen SUT and QSL (one adapter per served benchmark)
- :mod:`run`: one (benchmark, scenario, mode) through LoadGen, one process per run
- :mod:`package`, :mod:`check`: the submission layout, and the inference rules' checks on it
- :mod:`report`: the seed-style inference table and latency plots
- :mod:`audit`: a published round turned into verdicts and the same table
"""
