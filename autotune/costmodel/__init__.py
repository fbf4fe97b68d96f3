"""The learned cost model: loop-AST features, the XGBoost model, transfer.

``nest`` summarises a loop AST, ``footprint`` computes per-buffer access statistics,
``features`` turns both into fixed-length rows, ``cache`` serves rows per config index,
``model`` fits and scores them and ``transfer`` learns from other workloads' records (the
search walks a model with ``autotune.search.annealing``). Nothing is imported here: XGBoost
loads on first use.
"""
