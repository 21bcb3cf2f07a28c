"""The `admin` blueprint object, shared by the modules that add its routes."""
from __future__ import annotations

from flask import Blueprint

bp = Blueprint("admin", __name__, url_prefix="/admin", template_folder="templates",
               static_folder="static", static_url_path="/static")
