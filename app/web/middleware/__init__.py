"""The ASGI middleware around the routes, outermost first as `create_app` adds them: request ids
and logs (`observe`), JSON twins (`twins`), the repeated-paste shortcut (`paste_shortcut`), the
reader cache (`caching`), then sessions, `Allow` on a 405 (`allow`) and security headers
(`headers`)."""
