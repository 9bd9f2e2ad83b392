"""Browser admin pages under ``/admin``: Overview, Topics, Groups, Messages, DLQ.

Server-rendered Jinja2 templates with htmx and uPlot (vendored, no CDN). The pages call the
same services as ``/v1``; they hold no rules of their own.
"""

from app.admin.router import router, static_files

__all__ = ["router", "static_files"]
