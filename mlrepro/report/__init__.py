"""Rendering reports from the Jinja2 templates in ``report_templates/``."""
