"""Schedule spaces: knobs, their product (ConfigSpace) and its points (Config)."""
from autotune.space.config import Config
from autotune.space.configspace import ConfigSpace
from autotune.space.knobs import Annotate, Choice, Knob, Reorder
from autotune.space.split import Split

__all__ = ["Annotate", "Choice", "Config", "ConfigSpace", "Knob", "Reorder", "Split"]
