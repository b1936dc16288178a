"""The controller's HTTP/JSON API now lives in ``iris.cluster.controller.api`` (one router per
resource); this module keeps ``create_app`` importable from its old place."""

from iris.cluster.controller.api import create_app
from iris.cluster.controller.api.common import model_response

__all__ = ["create_app", "model_response"]
