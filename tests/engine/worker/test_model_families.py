"""The model families (engine/worker/models/families/): every model type served by one family, whose model class is a
torch module; what the loader and the catalog call supported is what the families serve."""

import pytest
import torch

from localchat.engine.worker.models.families import FAMILIES, SUPPORTED_ARCHITECTURES, family_for


def test_every_model_type_has_one_family_and_a_model_class():
    served = [model_type for family in FAMILIES for model_type in family.model_types]
    assert len(served) == len(set(served)) and tuple(served) == SUPPORTED_ARCHITECTURES
    for family in FAMILIES:
        assert issubclass(family.model_class(), torch.nn.Module), family.model
        assert all(family_for(model_type) is family for model_type in family.model_types)


def test_an_architecture_no_family_serves_is_refused():
    with pytest.raises(ValueError, match="'gpt2'; supported: " + ", ".join(SUPPORTED_ARCHITECTURES)):
        family_for("gpt2")
