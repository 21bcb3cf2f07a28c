"""List, create, edit and delete pages for each resource, one generic set of views
driven by a `Page` description (admin/page_specs.py). Writes go through the same
services as the API."""
from __future__ import annotations

from typing import Any

from flask import abort, flash, redirect, render_template, request, url_for

from control_plane.admin.blueprint import bp
from control_plane.admin.forms import (default_values, form_values, parse_form,
                                       submitted_values)
from control_plane.admin.page_specs import PAGES, Page
from control_plane.api.validation import ValidationError
from control_plane.api.views import db
from control_plane.services.errors import Conflict, Invalid
from control_plane.services.resources import BACKENDS, KEYS


def _page(kind: str) -> Page:
    page = PAGES.get(kind)
    if page is None:
        abort(404, f"there is no {kind!r} page")
    return page


def _render_form(page: Page, values: dict, errors: dict | None = None,
                 obj: Any = None, message: str | None = None, status: int = 200):
    creating = obj is None
    inputs = [i for i in page.inputs if creating or not i.create_only]
    return render_template("form.html", page=page, inputs=inputs, values=values,
                           errors=errors or {}, obj=obj, message=message,
                           choices=page.choices(db())), status


@bp.get("/<kind>/")
def resource_list(kind: str):
    page = _page(kind)
    rows = page.resource.list(db())
    return render_template("list.html", page=page, rows=rows)


@bp.route("/<kind>/new", methods=["GET", "POST"])
def resource_new(kind: str):
    page = _page(kind)
    if request.method == "GET":
        return _render_form(page, default_values(page.inputs))
    try:
        data = page.row_data(parse_form(request.form, page.inputs, page.schema,
                                        creating=True), creating=True)
        if page.kind == "keys":
            row, key = KEYS.create_with_key(db(), data)
            # Shown in this answer only (no redirect, no-store): it is never kept.
            return render_template("key_created.html", page=page, row=row, key=key), 201
        row = page.resource.create(db(), data)
    except (ValidationError, Invalid) as exc:
        return _render_form(page, submitted_values(request.form, page.inputs),
                            exc.fields, message="Please correct the fields marked below.",
                            status=422)
    except Conflict as exc:
        return _render_form(page, submitted_values(request.form, page.inputs),
                            message=str(exc), status=409)
    flash(f"Created {page.singular} {page.label(row)}.")
    return redirect(url_for("admin.resource_list", kind=kind))


@bp.route("/<kind>/<int:id>", methods=["GET", "POST"])
def resource_edit(kind: str, id: int):
    page = _page(kind)
    obj = page.resource.get(db(), id)
    if request.method == "GET":
        values = page.edit_values(obj) if page.edit_values else form_values(obj, page.inputs)
        return _render_form(page, values, obj=obj)
    try:
        data = page.row_data(parse_form(request.form, page.inputs, page.schema,
                                        creating=False), creating=False)
        obj = page.resource.update(db(), id, data)
    except (ValidationError, Invalid) as exc:
        return _render_form(page, submitted_values(request.form, page.inputs), exc.fields,
                            obj=obj, message="Please correct the fields marked below.",
                            status=422)
    except Conflict as exc:
        return _render_form(page, submitted_values(request.form, page.inputs), obj=obj,
                            message=str(exc), status=409)
    flash(f"Saved {page.singular} {page.label(obj)}.")
    return redirect(url_for("admin.resource_list", kind=kind))


@bp.post("/<kind>/<int:id>/delete")
def resource_delete(kind: str, id: int):
    page = _page(kind)
    obj = page.resource.get(db(), id)
    label = page.label(obj)
    try:
        page.resource.delete(db(), id)
    except Conflict as exc:
        flash(str(exc), "error")
        return redirect(url_for("admin.resource_list", kind=kind))
    done = "Revoked" if page.delete_verb == "Revoke" else "Deleted"
    flash(f"{done} {page.singular} {label}.")
    return redirect(url_for("admin.resource_list", kind=kind))


@bp.post("/backends/<int:id>/drain")
def backend_drain(id: int):
    backend = BACKENDS.drain(db(), id)
    flash(f"Drained backend {backend.name}: weight 0, it takes no new requests.")
    return redirect(url_for("admin.resource_list", kind="backends"))


@bp.post("/backends/<int:id>/restore")
def backend_restore(id: int):
    backend = BACKENDS.restore(db(), id)
    flash(f"Restored backend {backend.name} to weight {backend.weight}.")
    return redirect(url_for("admin.resource_list", kind="backends"))
