"""occupy's models, and the model-side tools users mix into their own models."""

from occupy.models.occupation import Occupation

__all__ = ["Occupation"]
