"""The learned cost model: loop-AST features, the XGBoost model, transfer, annealing.

``nest`` summarises a loop AST, ``footprint`` computes per-buffer access statistics,
``features`` turns both into fixed-length rows, ``cache`` serves rows per config index,
``model`` fits and scores them, ``transfer`` learns from other workloads' records and
``annealing`` searches a model. Nothing is imported here: XGBoost loads on first use.
"""
